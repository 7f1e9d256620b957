-- An org's guaranteed rates in force at `now` in the pool, output then input: from its packed
-- limits, or the latest of its scheduled changes due by `now` (_buckets.lua's limits_switch
-- applies them to the buckets on the next decision; this only reads). For scripts that weigh
-- orgs by their guarantee, bookings included: guarantee.lua, and the admission queue's.
local function org_guarantee_at(org_key, now)
  local v = redis.call('HMGET', org_key, F.layout.limits, F.layout.next_limits)
  local limits = {org_limits_unpack(v[1], org_key)}
  if v[2] then
    local schedule, i = {cmsgpack.unpack(v[2])}, 1
    while (limits[13] or 0) > 0 and limits[13] <= now and schedule[i] do
      limits, i = {cmsgpack.unpack(schedule[i])}, i + 1
    end
  end
  return limits[3], limits[7]
end
