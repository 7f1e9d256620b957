-- Replace one org's state in one pool: status and limits, its API-key digests, the pool's
-- headroom, and the floors of its day and month counters.
--
-- KEYS (K): OrgPublishKeys; ARGV (A): OrgPublishArgs, whose `state` is an OrgPublishState as
-- JSON (quotas/limiter/schema.py). Returns how many API keys the org has in the pool.
local state = cjson.decode(A.state)

-- Store every field of one hash from `values` (by readable name; none may be missing).
local function hash_write(k, fields, values)
  local args = {}
  for name, field in pairs(fields) do
    assert(values[name] ~= nil, 'no value for ' .. name)
    args[#args + 1] = field
    args[#args + 1] = values[name]
  end
  redis.call('HSET', k, unpack(args))
end

local old = redis.call('SMEMBERS', K.org_keys)
for i = 1, #old, 1000 do
  redis.call('HDEL', K.registry, unpack(old, i, math.min(i + 999, #old)))
end
redis.call('DEL', K.org_keys)
for _, api_key in ipairs(state.api_keys) do
  redis.call('HSET', K.registry, api_key.digest, api_key.entry)
  redis.call('SADD', K.org_keys, api_key.digest)
end
hash_write(K.org, F.org, state.org)
hash_write(K.pool, F.pool, state.pool)
-- After a flush the day's counter is rebuilt from recorded usage; a live counter (which also
-- holds open reservations) is never lowered.
redis.call('SET', K.day, state.day_used, 'NX', 'PX', 2 * DAY_MS)
-- The month's spend counter is raised to what billing has rated, never lowered: it rebuilds a
-- flushed counter and repairs increments lost while Redis was unreachable. (The live counter
-- rounds each batch up, so it is normally at or above the rated figure.)
if num(redis.call('GET', K.spend), -1) < state.month_spend then
  redis.call('SET', K.spend, state.month_spend, 'EX', state.month_spend_ttl_s)
end
return #state.api_keys
