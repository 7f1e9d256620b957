-- Replace one org's state in one pool: status and limits and their scheduled changes, its API
-- keys (digests, default tiers, slices), the pool's own values and their scheduled changes, and
-- the floors of its day and month counters.
--
-- KEYS (K): OrgPublishKeys; ARGV (A): OrgPublishArgs, whose `state` is an OrgPublishState as
-- JSON (quotas/limiter/schema.py). Returns how many API keys the org has in the pool.
local state = cjson.decode(A.state)

-- Raise a counter to at least `floor`, never lower it (a live counter also holds open
-- reservations). Raised, not set if missing: after a flush, usage may reach the pool before
-- any publish and create the counter from its own events alone.
local function raise(k, floor, ttl_ms)
  if num(redis.call('GET', k), -1) < floor then redis.call('SET', k, floor, 'PX', ttl_ms) end
end

-- The limits of a key slice (its levels and day are the engine's own).
local SLICE_LIMITS = {output_rate = F.key.output_rate, output_capacity = F.key.output_capacity,
                      input_rate = F.key.input_rate, input_capacity = F.key.input_capacity,
                      daily_tokens = F.key.daily_tokens, max_concurrency = F.key.max_concurrency}

local old = redis.call('SMEMBERS', K.org_keys)
for i = 1, #old, 1000 do
  redis.call('HDEL', K.registry, unpack(old, i, math.min(i + 999, #old)))
end
redis.call('DEL', K.org_keys)
for _, api_key in ipairs(state.api_keys) do
  redis.call('HSET', K.registry, api_key.digest, api_key.entry)
  redis.call('SADD', K.org_keys, api_key.digest)
  local slice_key = key(KEY.key_slice, api_key.key_id)
  if api_key.slice ~= cjson.null then
    hash_write(slice_key, SLICE_LIMITS, api_key.slice)
    -- The key's day, like the org's: at least what PostgreSQL recorded for it today.
    local day, used = unpack(redis.call('HMGET', slice_key, F.key.day, F.key.day_used))
    if day ~= state.day or num(used, 0) < api_key.day_used then
      redis.call('HSET', slice_key, F.key.day, state.day, F.key.day_used,
                 day == state.day and math.max(num(used, 0), api_key.day_used)
                 or api_key.day_used)
    end
  else
    redis.call('DEL', slice_key)
  end
end
limits_schedule_write(K.org, F.org, state.org, org_limits_of, state.schedule)
limits_schedule_write(K.pool, F.pool, state.pool, pool_limits_of, state.pool_schedule)
raise(K.day, state.day_used, 2 * DAY_MS)
-- The month's spend counter is raised to what billing has rated: it rebuilds a flushed counter
-- and repairs increments lost while Redis was unreachable. (The live counter rounds each batch
-- up, so it is normally at or above the rated figure.)
raise(K.spend, state.month_spend, state.month_spend_ttl_s * 1000)
-- Without a cap, no money is held: a cap set later starts from the reservations made after it.
if state.org.spend_cap == 0 then redis.call('DEL', K.money) end
return #state.api_keys
