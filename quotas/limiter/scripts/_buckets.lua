-- The TPS buckets, for the scripts that debit or refund them (authorize, settle). Those declare
-- K.pool. An org's levels live in its hash beside its limits, the headroom's in the pool's hash
-- beside its rates: one read each.
--
-- Each org has two dimensions, output (decode) and input (prefill), each made of its guaranteed
-- bucket, its burst bucket and the pool's headroom bucket of that dimension. An org without
-- input rates (its pool declares no prefill capacity) meters input with output, in the output
-- dimension, as before the two were apart.

-- A token bucket {rate, capacity, level, at, overflow, missing}, refilled to `now` from its
-- stored level and timestamp, numbers (a missing level, nil, is a full bucket, from `now`:
-- write it to start measuring its overflow). `overflow` is the refill the capacity cut off
-- since the last write. Callers pass their own clock, and a caller whose `now` is behind the
-- last write (it computed `now` first but ran second) must neither refill nor move the
-- timestamp back: that would count the same interval twice and admit more than the rate.
local function bucket(rate, capacity, level, at, now)
  if level == nil then
    return {rate = rate, capacity = capacity, level = capacity, at = now, overflow = 0,
            missing = true}
  end
  if now <= at then
    return {rate = rate, capacity = capacity, level = level, at = at, overflow = 0}
  end
  local refilled = level + (now - at) * rate / 1000
  return {rate = rate, capacity = capacity, at = now, level = math.min(capacity, refilled),
          overflow = math.max(0, refilled - math.max(capacity, level))}
end

-- Bucket levels and the time they were measured at, packed (cmsgpack, F.layout.levels) like
-- the limits: a level stays a number from one call to the next, neither formatted (%.17g) nor
-- parsed (strtod). A hash written before they were packed keeps them in the readable fields `...`,
-- read once (the next write packs them). Missing levels are nil: full buckets.
local function levels_unpack(packed, k, ...)
  if packed then return cmsgpack.unpack(packed) end
  return fields_read(k, nil, ...)
end

-- The pool's headroom buckets (from its packed limits and levels), refilled to `now`, then
-- the output estimate of orgs without history and its floor (false: never published).
local function pool_read(now)
  local p = redis.call('HMGET', K.pool, F.layout.limits, F.layout.levels)
  local rate, capacity, input_rate, input_capacity, estimate_default, estimate_floor =
    pool_limits_unpack(p[1], K.pool)
  local level, input_level, at = levels_unpack(p[2], K.pool, F.headroom.level,
                                               F.headroom.input_level, F.headroom.at)
  return {output = bucket(rate or 0, capacity or 0, level, at, now),
          input = bucket(input_rate or 0, input_capacity or 0, input_level, at, now)},
         estimate_default, estimate_floor
end

-- The org's buckets from its rates and capacities (numbers: guaranteed, burst, input
-- guaranteed, input burst) and its packed levels (`levels`, from its hash `org_key`),
-- refilled to `now`, with the pool's headroom (shared: several orgs settled in one call share
-- one headroom). Without input rates (input metered with output) there is no input dimension.
local function buckets_from(gr, gc, br, bc, igr, igc, ibr, ibc, levels, org_key, headroom, now)
  local g, b, gi, bi, t = levels_unpack(levels, org_key, F.bucket.guaranteed, F.bucket.burst,
                                        F.bucket.input_guaranteed, F.bucket.input_burst,
                                        F.bucket.at)
  local s = {output = {g = bucket(gr, gc, g, t, now), b = bucket(br, bc, b, t, now),
                       h = headroom.output},
             apart = igr > 0}
  if s.apart then
    s.input = {g = bucket(igr, igc, gi, t, now), b = bucket(ibr, ibc, bi, t, now),
               h = headroom.input}
  end
  return s
end

local function buckets_write(org_key, s)
  local input = s.input or {}
  redis.call('HSET', org_key, F.layout.levels, cmsgpack.pack(
    s.output.g.level, s.output.b.level, input.g and input.g.level, input.b and input.b.level,
    s.output.g.at))
end

local function headroom_write(headroom)
  redis.call('HSET', K.pool, F.layout.levels, cmsgpack.pack(
    headroom.output.level, headroom.input.level, headroom.output.at))
end

-- An API key's slice (KeySliceFields) as two buckets (a rate of 0: no limit of its own) and its
-- day, refilled to `now`.
local function key_slice_read(key_id, now, today)
  local v = redis.call('HMGET', key(KEY.key_slice, key_id), F.key.output_rate,
                       F.key.output_capacity, F.key.input_rate, F.key.input_capacity,
                       F.key.daily_tokens, F.key.max_concurrency, F.key.output_level,
                       F.key.input_level, F.key.at, F.key.day, F.key.day_used)
  local used = 0
  if v[10] == today then used = num(v[11], 0) end
  return {
    output = bucket(num(v[1], 0), num(v[2], 0), tonumber(v[7]), tonumber(v[9]), now),
    input = bucket(num(v[3], 0), num(v[4], 0), tonumber(v[8]), tonumber(v[9]), now),
    daily = num(v[5], 0), conc = num(v[6], 0), day = today, day_used = used,
  }
end

local function key_slice_write(key_id, k)
  redis.call('HSET', key(KEY.key_slice, key_id), F.key.output_level, k.output.level,
             F.key.input_level, k.input.level, F.key.at, string.format('%d', k.output.at),
             F.key.day, k.day, F.key.day_used, k.day_used)
end
