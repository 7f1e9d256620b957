-- The TPS buckets, for the scripts that debit or refund them (authorize, settle). Those declare
-- K.pool and K.headroom_bucket.

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
-- `limits` holds the org's four rates and capacities when the caller has read them already.
local function buckets_read(org, now, limits)
  local l = limits or redis.call('HMGET', key(KEY.org, org), F.org.guaranteed_rate,
                                 F.org.guaranteed_capacity, F.org.burst_rate,
                                 F.org.burst_capacity)
  local guaranteed_rate, guaranteed_capacity, burst_rate, burst_capacity = unpack(l)
  local guaranteed, burst, at = unpack(redis.call(
    'HMGET', key(KEY.buckets, org), F.bucket.guaranteed, F.bucket.burst, F.bucket.at))
  local headroom_rate, headroom_capacity = unpack(redis.call(
    'HMGET', K.pool, F.pool.headroom_rate, F.pool.headroom_capacity))
  local headroom, headroom_at = unpack(redis.call(
    'HMGET', K.headroom_bucket, F.headroom.level, F.headroom.at))
  return {
    guaranteed = bucket(num(guaranteed_rate, 0), num(guaranteed_capacity, 0), guaranteed, at,
                        now),
    burst = bucket(num(burst_rate, 0), num(burst_capacity, 0), burst, at, now),
    headroom = bucket(num(headroom_rate, 0), num(headroom_capacity, 0), headroom, headroom_at,
                      now),
  }
end

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
