-- The TPS buckets, for the scripts that debit or refund them (authorize, settle). Those declare
-- K.pool. An org's levels live in its hash beside its limits, the headroom's in the pool's hash
-- beside its rates: one read each.
--
-- Each org has two dimensions, output (decode) and input (prefill), each made of its guaranteed
-- bucket, its burst bucket and the pool's headroom bucket of that dimension. An org without
-- input rates (its pool declares no prefill capacity) meters input with output, in the output
-- dimension: that pool's one capacity bounds both.
--
-- Authorize keeps a decision's buckets in locals (a table costs Redis ~3,000 instructions with
-- its collection, and a decision would build a dozen); settle, which handles many orgs in one
-- call, keeps them in tables (settle.lua). Both refill them here.

-- A token bucket of `rate` and `capacity` refilled to `now` from its stored level and
-- timestamp, numbers: its level, the time that level is measured at, `overflow` (the refill
-- the capacity cut off since the last write) and whether it was missing (a missing level, nil,
-- is a full bucket, from `now`: write it to start measuring its overflow). Callers pass their
-- own clock, and a caller whose `now` is behind the last write (it computed `now` first but
-- ran second) must neither refill nor move the timestamp back: that would count the same
-- interval twice and admit more than the rate.
local function refill(rate, capacity, level, at, now)
  if level == nil then return capacity, now, 0, true end
  if now <= at then return level, at, 0, false end
  local refilled = level + (now - at) * rate / 1000
  return math.min(capacity, refilled), now, math.max(0, refilled - math.max(capacity, level)),
         false
end

-- Bucket levels and the time they were measured at, packed (cmsgpack, F.layout.levels) like
-- the limits: a level stays a number from one call to the next, neither formatted (%.17g) nor
-- parsed (strtod). A hash written before they were packed keeps them in the readable fields `...`,
-- read once (the next write packs them). Missing levels are nil: full buckets.
local function levels_unpack(packed, k, ...)
  if packed then return cmsgpack.unpack(packed) end
  return fields_read(k, nil, ...)
end

-- An org's levels (guaranteed, burst, input guaranteed, input burst: nil where it has no
-- input dimension) and the time they were measured at: from its hash's packed field `packed`
-- (org_key's F.layout.levels), and into it.
local function org_levels_unpack(packed, org_key)
  return levels_unpack(packed, org_key, F.bucket.guaranteed, F.bucket.burst,
                       F.bucket.input_guaranteed, F.bucket.input_burst, F.bucket.at)
end

local function org_levels_write(org_key, guaranteed, burst, input_guaranteed, input_burst, at)
  redis.call('HSET', org_key, F.layout.levels,
             cmsgpack.pack(guaranteed, burst, input_guaranteed, input_burst, at))
end

local function headroom_levels_write(level, input_level, at)
  redis.call('HSET', K.pool, F.layout.levels, cmsgpack.pack(level, input_level, at))
end

-- A scheduled change of limits: a booking's first or last second (docs/bookings.md). The
-- packed limits (F.layout.limits) end with the instant of their next change (_common.lua), and
-- F.layout.next_limits holds the changes to come, cmsgpack of limits packed the same way (each
-- ending with the instant of the one after it). The first call at or after an instant applies
-- it, so no beat lags it: each bucket is refilled up to the instant at its old rate, then
-- clipped to its new capacity (a missing level, a full bucket, is full at the old capacity; a
-- bucket without a rate keeps none). The new limits, what is left of the schedule and the
-- levels are written. The buckets' rates and capacities are `count` pairs of the packed limits,
-- after `skip` values: the org's (2, 4: guaranteed, burst, input guaranteed, input burst) or
-- the pool's (0, 2: headroom, input headroom). Returns the limits in force, the levels (a
-- table, in that order) and the time they are measured at.
local function limits_switch(k, packed, levels, at, now, skip, count)
  local schedule = {cmsgpack.unpack(redis.call('HGET', k, F.layout.next_limits))}
  local old, i = {cmsgpack.unpack(packed)}, 1
  local when = old[#old]
  while when > 0 and when <= now and schedule[i] do
    local new = {cmsgpack.unpack(schedule[i])}
    for j = 1, count do
      local rate, capacity = old[skip + 2 * j - 1], old[skip + 2 * j]
      local level = levels[j]
      if level == nil and rate > 0 then level, at = capacity, at or when end
      if level ~= nil then
        levels[j] = math.min(refill(rate, capacity, level, at, when), new[skip + 2 * j])
      end
    end
    at, packed, old, i = math.max(at or when, when), schedule[i], new, i + 1
    when = new[#new]
  end
  redis.call('HSET', k, F.layout.limits, packed)
  if schedule[i] then
    redis.call('HSET', k, F.layout.next_limits, cmsgpack.pack(unpack(schedule, i)))
  else
    redis.call('HDEL', k, F.layout.next_limits)
  end
  if skip > 0 then
    org_levels_write(k, levels[1], levels[2], levels[3], levels[4], at)
  else
    headroom_levels_write(levels[1], levels[2], at)
  end
  return packed, levels, at
end

-- The pool's headroom at `now`: the output and input rates and capacities (0 when never
-- published), the output estimate of orgs without history and its floor (false: never
-- published), then the output and input levels and the time they were measured at.
local function pool_headroom_read(now)
  local p = redis.call('HMGET', K.pool, F.layout.limits, F.layout.levels)
  local rate, capacity, input_rate, input_capacity, estimate_default, estimate_floor, next_at =
    pool_limits_unpack(p[1], K.pool)
  local level, input_level, at = levels_unpack(p[2], K.pool, F.headroom.level,
                                               F.headroom.input_level, F.headroom.at)
  if next_at and next_at > 0 and now >= next_at then  -- the pool's guarantees change
    local packed, levels
    packed, levels, at = limits_switch(K.pool, p[1], {level, input_level}, at, now, 0, 2)
    level, input_level = levels[1], levels[2]
    rate, capacity, input_rate, input_capacity, estimate_default, estimate_floor =
      pool_limits_unpack(packed, K.pool)
  end
  return rate or 0, capacity or 0, input_rate or 0, input_capacity or 0, estimate_default,
         estimate_floor, level, input_level, at
end

-- A bucket as a table {rate, capacity, level, at}, refilled to `now`: settle's, and an API key's.
local function bucket(rate, capacity, level, at, now)
  local refilled, refilled_at = refill(rate, capacity, level, at, now)
  return {rate = rate, capacity = capacity, level = refilled, at = refilled_at}
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
