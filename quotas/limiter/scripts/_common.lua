-- Shared by every script: quotas/limiter/connection.py prepends it, after the prelude that
-- schema.py generates (F, KEY, K, A, ITEMS, reply).
--
-- Every key of one pool carries the hash tag {p<pool_id>}, so a script touches exactly one Redis
-- Cluster slot. A script's KEYS name every key its caller can know; the keys of an org that the
-- caller cannot know (authorize learns the org from the API-key lookup, settle from each
-- reservation) are derived from the tag of its first key: same slot, so Cluster-safe.
local PREFIX = string.match(KEYS[1], '^({p%d+})')

local function key(...)
  return table.concat({PREFIX, ...}, ':')
end

local function num(value, default)
  if value == false or value == nil then return default end
  return tonumber(value)
end

-- Every field of one stored hash, by readable name; `fields` is one of F's tables.
local function hash_read(k, fields)
  local names, stored = {}, {}
  for name, field in pairs(fields) do
    names[#names + 1], stored[#stored + 1] = name, field
  end
  local values = redis.call('HMGET', k, unpack(stored))
  local out = {}
  for i, name in ipairs(names) do out[name] = values[i] end
  return out
end

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

-- A token bucket {rate, capacity, level, at}, refilled to `now` from its stored level and
-- timestamp (a missing bucket is full). Callers pass their own clock, and a caller whose `now`
-- is behind the last write (it computed `now` first but ran second) must neither refill nor
-- move the timestamp back: that would count the same interval twice and admit more than the
-- rate.
local function bucket(rate, capacity, level, at, now)
  if level == false or level == nil then
    return {rate = rate, capacity = capacity, level = capacity, at = now}
  end
  at = tonumber(at)
  if now <= at then return {rate = rate, capacity = capacity, level = tonumber(level), at = at} end
  return {rate = rate, capacity = capacity, at = now,
          level = math.min(capacity, tonumber(level) + (now - at) * rate / 1000)}
end

-- The org's guaranteed and burst buckets and the pool's headroom bucket, refilled to `now`.
-- `limits` is the org's hash (hash_read of F.org) when the caller has read it already.
-- Scripts that call this declare K.pool and K.headroom_bucket.
local function buckets_read(org, now, limits)
  limits = limits or hash_read(key(KEY.org, org), F.org)
  local stored = hash_read(key(KEY.buckets, org), F.bucket)
  local pool = hash_read(K.pool, F.pool)
  local headroom = hash_read(K.headroom_bucket, F.headroom)
  return {
    guaranteed = bucket(num(limits.guaranteed_rate, 0), num(limits.guaranteed_capacity, 0),
                        stored.guaranteed, stored.at, now),
    burst = bucket(num(limits.burst_rate, 0), num(limits.burst_capacity, 0),
                   stored.burst, stored.at, now),
    headroom = bucket(num(pool.headroom_rate, 0), num(pool.headroom_capacity, 0),
                      headroom.level, headroom.at, now),
  }
end

local DAY_MS = 86400000

-- `headroom_changed` false skips the pool bucket: its stored level refills to the same value.
local function buckets_write(org, s, headroom_changed)
  local buckets = key(KEY.buckets, org)
  redis.call('HSET', buckets, F.bucket.guaranteed, s.guaranteed.level,
             F.bucket.burst, s.burst.level, F.bucket.at, s.guaranteed.at)
  redis.call('PEXPIRE', buckets, DAY_MS)
  if headroom_changed then
    redis.call('HSET', K.headroom_bucket, F.headroom.level, s.headroom.level,
               F.headroom.at, s.headroom.at)
    redis.call('PEXPIRE', K.headroom_bucket, DAY_MS)
  end
end
