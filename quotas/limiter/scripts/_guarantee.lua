-- An org's guaranteed rates in force at `now` in the pool, output then input: the packed limits
-- (F.layout.limits), or the latest scheduled change due by `now` (_buckets.lua's
-- limits_switch applies it to the buckets on the next decision; this only reads). For scripts
-- that weigh orgs by their guarantee, bookings included: guarantee.lua, and the admission
-- queue's.
local function org_guarantee_at(org_key, now)
  local v = redis.call('HMGET', org_key, F.layout.limits, F.layout.next_at, F.layout.next_limits)
  local packed = v[1]
  if v[2] and now >= tonumber(v[2]) then
    local schedule = {cmsgpack.unpack(v[3])}
    local i = 1
    while schedule[i] and schedule[i] <= now do packed, i = schedule[i + 1], i + 2 end
  end
  local _, _, gr, _, _, _, igr = org_limits_unpack(packed, org_key)
  return gr, igr
end
