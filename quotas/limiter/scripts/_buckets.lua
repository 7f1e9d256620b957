-- The TPS buckets, for the scripts that debit or refund them (authorize, settle). Those declare
-- K.pool. An org's levels live in its hash beside its limits, the headroom's in the pool's hash
-- beside its rates: one read each.
--
-- Each org has two dimensions, output (decode) and input (prefill), each made of its guaranteed
-- bucket, its burst bucket and the pool's headroom bucket of that dimension. An org without
-- input rates (its pool declares no prefill capacity) meters input with output, in the output
-- dimension, as before the two were apart.

-- A token bucket {rate, capacity, level, at, overflow, missing}, refilled to `now` from its
-- stored level and timestamp (a missing bucket is full, from `now`: write it to start measuring
-- its overflow). `overflow` is the refill the capacity cut off since the last write. Callers
-- pass their own clock, and a caller whose `now` is behind the last write (it computed `now`
-- first but ran second) must neither refill nor move the timestamp back: that would count the
-- same interval twice and admit more than the rate.
local function bucket(rate, capacity, level, at, now)
  if level == false or level == nil then
    return {rate = rate, capacity = capacity, level = capacity, at = now, overflow = 0,
            missing = true}
  end
  at, level = tonumber(at), tonumber(level)
  if now <= at then
    return {rate = rate, capacity = capacity, level = level, at = at, overflow = 0}
  end
  local refilled = level + (now - at) * rate / 1000
  return {rate = rate, capacity = capacity, at = now, level = math.min(capacity, refilled),
          overflow = math.max(0, refilled - math.max(capacity, level))}
end

-- The fields of the org's hash the buckets need (its rates and capacities, then its levels),
-- and of the pool's hash (the headroom's rates and capacities, then its levels).
local BUCKET_FIELDS = {F.org.guaranteed_rate, F.org.guaranteed_capacity, F.org.burst_rate,
                       F.org.burst_capacity, F.org.input_guaranteed_rate,
                       F.org.input_guaranteed_capacity, F.org.input_burst_rate,
                       F.org.input_burst_capacity, F.bucket.guaranteed, F.bucket.burst,
                       F.bucket.input_guaranteed, F.bucket.input_burst, F.bucket.at}
local HEADROOM_FIELDS = {F.pool.headroom_rate, F.pool.headroom_capacity,
                         F.pool.input_headroom_rate, F.pool.input_headroom_capacity,
                         F.headroom.level, F.headroom.input_level, F.headroom.at}

-- The pool's headroom buckets from HEADROOM_FIELDS' values (from h[at + 1]), refilled to `now`.
local function headroom_of(h, at, now)
  return {output = bucket(num(h[at + 1], 0), num(h[at + 2], 0), h[at + 5], h[at + 7], now),
          input = bucket(num(h[at + 3], 0), num(h[at + 4], 0), h[at + 6], h[at + 7], now)}
end

-- The org's buckets from BUCKET_FIELDS' values (from b[at + 1]), refilled to `now`, with the
-- pool's headroom (shared: several orgs settled in one call share one headroom). Without input
-- rates (input metered with output) there is no input dimension.
local function buckets_of(b, at, headroom, now)
  local s = {output = {g = bucket(num(b[at + 1], 0), num(b[at + 2], 0), b[at + 9], b[at + 13],
                                  now),
                       b = bucket(num(b[at + 3], 0), num(b[at + 4], 0), b[at + 10], b[at + 13],
                                  now),
                       h = headroom.output},
             apart = num(b[at + 5], 0) > 0}
  if s.apart then
    s.input = {g = bucket(num(b[at + 5], 0), num(b[at + 6], 0), b[at + 11], b[at + 13], now),
               b = bucket(num(b[at + 7], 0), num(b[at + 8], 0), b[at + 12], b[at + 13], now),
               h = headroom.input}
  end
  return s
end

-- Levels may be fractional and go to Redis as numbers; timestamps are whole milliseconds and
-- go as strings (Redis formats a number argument with %.17g: several times the cost).
local function buckets_write(org, s)
  local at = string.format('%d', s.output.g.at)
  if s.apart then
    redis.call('HSET', key(KEY.org, org), F.bucket.guaranteed, s.output.g.level,
               F.bucket.burst, s.output.b.level, F.bucket.input_guaranteed, s.input.g.level,
               F.bucket.input_burst, s.input.b.level, F.bucket.at, at)
  else
    redis.call('HSET', key(KEY.org, org), F.bucket.guaranteed, s.output.g.level,
               F.bucket.burst, s.output.b.level, F.bucket.at, at)
  end
end

local function headroom_write(headroom)
  redis.call('HSET', K.pool, F.headroom.level, headroom.output.level, F.headroom.input_level,
             headroom.input.level, F.headroom.at, string.format('%d', headroom.output.at))
end

-- Give back `unused` tokens of one dimension (what the request did not use of its
-- reservation: refunds go to the burst and headroom up to what was borrowed, the rest to the
-- guaranteed bucket), or take `-unused` more (usage beyond the reservation: a debt the
-- guaranteed rate repays, so the level may go negative). Returns whether the headroom moved.
local function buckets_settle(d, unused, borrowed)
  if unused < 0 then
    d.g.level = d.g.level + unused
    return false
  end
  local to_burst = math.min(unused, borrowed)
  d.b.level = math.min(d.b.capacity, d.b.level + to_burst)
  d.h.level = math.min(d.h.capacity, d.h.level + to_burst)
  d.g.level = math.min(d.g.capacity, d.g.level + unused - to_burst)
  return to_burst > 0
end

-- An API key's slice (KeySliceFields) as two buckets (a rate of 0: no limit of its own) and its
-- day, refilled to `now`.
local KEY_SLICE_FIELDS = {F.key.output_rate, F.key.output_capacity, F.key.input_rate,
                          F.key.input_capacity, F.key.daily_tokens, F.key.max_concurrency,
                          F.key.output_level, F.key.input_level, F.key.at, F.key.day,
                          F.key.day_used}
local function key_slice_read(key_id, now, today)
  local v = redis.call('HMGET', key(KEY.key_slice, key_id), unpack(KEY_SLICE_FIELDS))
  local used = 0
  if v[10] == today then used = num(v[11], 0) end
  return {
    output = bucket(num(v[1], 0), num(v[2], 0), v[7], v[9], now),
    input = bucket(num(v[3], 0), num(v[4], 0), v[8], v[9], now),
    daily = num(v[5], 0), conc = num(v[6], 0), day = today, day_used = used,
  }
end

local function key_slice_write(key_id, k)
  redis.call('HSET', key(KEY.key_slice, key_id), F.key.output_level, k.output.level,
             F.key.input_level, k.input.level, F.key.at, string.format('%d', k.output.at),
             F.key.day, k.day, F.key.day_used, k.day_used)
end
