-- Settle finished requests of one pool, idempotently by request_id: refund what a reservation
-- did not use (or debit the excess: the buckets may go negative, the debt is paid by the
-- refill, never forgiven), free its concurrency slot and the money it held, count usage that
-- had no reservation (expired, or admitted while failing open), and learn the output length
-- of completed requests for the estimates authorize reserves. Buckets and histograms are read
-- and written once per org (and key), so a batch of 500 events costs one read and write each.
--
-- KEYS (K): SettleKeys, then one reservation key per item; ARGV (A): SettleArgs, then each
-- item's Settlement fields (ITEMS, quotas/limiter/schema.py). Returns how many were settled.
-- An org's keys are derived from the pool's tag: the owner is read from each reservation.
local now, today, record_ttl = tonumber(A.now_ms), A.day, tonumber(A.record_ttl_ms)
local min_samples, half_life = tonumber(A.estimate_min_samples), tonumber(A.estimate_half_life)
local estimate_ttl = tonumber(A.estimate_ttl_ms)
local settled = 0

-- The buckets (_buckets.lua) as tables, refilled to `now`: a batch settles many orgs. The
-- pool's headroom {output, input}, shared by its orgs' bursts.
local function headroom_read(now)
  local rate, capacity, input_rate, input_capacity, _, _, level, input_level, at =
    pool_headroom_read(now)
  return {output = bucket(rate, capacity, level, at, now),
          input = bucket(input_rate, input_capacity, input_level, at, now)}
end

-- An org's {output = {g, b, h}, input = {g, b, h} (absent when input is metered with output),
-- apart} from its hash `org_key` (authorize reads more of it at once), with the headroom.
local function org_buckets_read(org_key, headroom, now)
  local o = redis.call('HMGET', org_key, F.layout.limits, F.layout.levels)
  local _, _, gr, gc, br, bc, igr, igc, ibr, ibc, _, _, next_at = org_limits_unpack(o[1], org_key)
  local g, b, gi, bi, at = org_levels_unpack(o[2], org_key)
  if next_at and next_at > 0 and now >= next_at then  -- a booking's edge (as in authorize)
    local packed, levels
    packed, levels, at = limits_switch(org_key, o[1], {g, b, gi, bi}, at, now, 2, 4)
    g, b, gi, bi = levels[1], levels[2], levels[3], levels[4]
    _, _, gr, gc, br, bc, igr, igc, ibr, ibc = org_limits_unpack(packed, org_key)
  end
  local s = {output = {g = bucket(gr, gc, g, at, now), b = bucket(br, bc, b, at, now),
                       h = headroom.output},
             apart = igr > 0}
  if s.apart then
    s.input = {g = bucket(igr, igc, gi, at, now), b = bucket(ibr, ibc, bi, at, now),
               h = headroom.input}
  end
  return s
end

-- Give back `unused` tokens of one dimension (what the request did not use of its
-- reservation), or take `-unused` more (usage beyond the reservation: a debt the guaranteed
-- rate repays, so the level may go negative). Returns whether the headroom moved.
--
-- A bucket gets back at most what the request took from its level (F.res.taken), in the
-- reverse order authorize took it (plan): what it borrowed, to the burst and the headroom;
-- what came from the guaranteed bucket, to it; what the burst's level paid of the free part,
-- to the burst. The rest of the free part was refill that the capacities cut off: given back,
-- it would be capacity nobody had. A record without its parts (`guaranteed` nil) has only
-- `borrowed`, free and borrowed together: that much goes to the burst and the headroom, the
-- rest to the guaranteed bucket.
local function buckets_settle(d, unused, borrowed, guaranteed, free_burst)
  if unused < 0 then
    d.g.level = d.g.level + unused
    return false
  end
  local to_both = math.min(unused, borrowed)
  local to_guaranteed, to_burst = unused - to_both, to_both
  if guaranteed then
    to_guaranteed = math.min(to_guaranteed, guaranteed)
    to_burst = to_burst + math.min(unused - to_both - to_guaranteed, free_burst)
  end
  d.b.level = math.min(d.b.capacity, d.b.level + to_burst)
  d.h.level = math.min(d.h.capacity, d.h.level + to_both)
  d.g.level = math.min(d.g.capacity, d.g.level + to_guaranteed)
  return to_both > 0
end

local orgs, keys, histograms = {}, {}, {}  -- each read once, written once at the end
local day_moves = {}  -- day counter key -> what the batch moves it by, applied once at the end
local sliced_keys = {}  -- API key id -> whether it has a slice (asked once per call)
local headroom, headroom_changed = nil, false  -- the pool's, shared by its orgs

local function org_buckets(org)
  if not orgs[org] then
    headroom = headroom or headroom_read(now)
    orgs[org] = org_buckets_read(key(KEY.org, org), headroom, now)
  end
  return orgs[org]
end

local function key_slice(key_id)
  keys[key_id] = keys[key_id] or key_slice_read(key_id, now, today)
  return keys[key_id]
end

-- What is still owed of a debt `unused` (< 0) of usage without a reservation that finished
-- `age` ms ago (a late report): the bucket's `rate` would have repaid the rest since, as an
-- otherwise idle org's bucket debited when the request finished would be full again by now.
local function still_owed(unused, rate, age)
  if unused >= 0 or age == 0 then return unused end
  return math.min(0, unused + age * rate / 1000)
end

-- A key's own bucket of one dimension gets back `unused` (capped), or owes `-unused`.
local function key_bucket_settle(b, unused)
  if b.rate > 0 then b.level = math.min(b.capacity, b.level + unused) end
end

-- Output lengths are kept in log-spaced buckets: index floor(8 log2(n + 1)), so a bucket spans
-- a ratio of 2^(1/8) (9%). Weights grow by 2^(1/half_life) per observation (older ones count
-- less); past 2^32 every weight is scaled back and negligible buckets are dropped.
local LOG2 = math.log(2)
local function histogram(owner, key_id)
  local hkey = key_id and key(KEY.histogram, owner, key_id) or key(KEY.histogram, owner)
  local h = histograms[hkey]
  if h then return h end
  h = {owner = owner, key_id = key_id, weights = {}, n = 0, z = 0, total = 0, dropped = {}}
  local raw = redis.call('HGETALL', hkey)
  for i = 1, #raw, 2 do
    local field, value = raw[i], tonumber(raw[i + 1])
    if field == F.hist.count then h.n = value
    elseif field == F.hist.base then h.z = value
    elseif field == F.hist.total then h.total = value
    else h.weights[tonumber(field)] = value end
  end
  histograms[hkey] = h
  return h
end

local function observe(h, output)
  h.n = h.n + 1
  if (h.n - h.z) / half_life >= 32 then
    local scale = 2 ^ (-(h.n - h.z) / half_life)
    h.total = 0
    for index, weight in pairs(h.weights) do
      if weight * scale < 1e-6 then
        h.weights[index] = nil
        h.dropped[#h.dropped + 1] = index
      else
        h.weights[index] = weight * scale
        h.total = h.total + weight * scale
      end
    end
    h.z = h.n
  end
  local weight = 2 ^ ((h.n - h.z) / half_life)
  local index = math.floor(8 * math.log(output + 1) / LOG2)
  h.weights[index] = (h.weights[index] or 0) + weight
  h.total = h.total + weight
end

-- The p95: the upper edge of the bucket where the weight below reaches 95% (never below the
-- weighted p95, at most 9% above it).
local function p95(h)
  local indexes = {}
  for index in pairs(h.weights) do indexes[#indexes + 1] = index end
  table.sort(indexes)
  local below = 0
  for _, index in ipairs(indexes) do
    below = below + h.weights[index]
    if below >= 0.95 * h.total then return math.ceil(2 ^ ((index + 1) / 8) - 1) end
  end
  return math.ceil(2 ^ ((indexes[#indexes] + 1) / 8) - 1)
end

for _, item in ipairs(ITEMS) do
  local input, output = tonumber(item.input_tokens), tonumber(item.output_tokens)
  -- Cached input tokens were served from the upstream's cache: no prefill capacity spent.
  local prefill = input - tonumber(item.cached_input_tokens)
  local r = redis.call('HMGET', item.key, F.res.org, F.res.cost, F.res.input, F.res.from_burst,
                       F.res.input_from_burst, F.res.key_slice, F.res.day, F.res.state,
                       F.res.api_key, F.res.lease_owner, F.res.taken)
  local reserved_by, state = r[1], r[8]
  if state ~= 'settled' then
    -- Without a reservation, usage counts on the day the request started (a late report of
    -- yesterday's is not today's), as the rebuild from PostgreSQL counts it.
    local owner, day, key_id = item.org_id, #item.day > 0 and item.day or today,
                               tonumber(item.api_key_id)
    local reserved_in, reserved_out, borrowed_out, borrowed_in = 0, 0, 0, 0
    -- From the guaranteed bucket, and of the free part from the burst's level (nil: a record
    -- without them, F.res.from_burst's; or one that took it all from the guaranteed bucket,
    -- whose unused tokens all go back there either way).
    local guaranteed_out, free_burst_out, guaranteed_in, free_burst_in = nil, nil, nil, nil
    local reserved = reserved_by and state ~= 'spilled'
    if reserved then
      owner, day, key_id = reserved_by, r[7], num(r[9], 0)
      reserved_in = num(r[3], tonumber(r[2]))
      reserved_out = tonumber(r[2]) - reserved_in
      if r[11] then
        borrowed_out, guaranteed_out, free_burst_out, borrowed_in, guaranteed_in,
          free_burst_in = cmsgpack.unpack(r[11])
      else
        borrowed_out, borrowed_in = num(r[4], 0), num(r[5], 0)
      end
      redis.call('ZREM', key(KEY.inflight, owner), item.request_id)
      if r[10] then redis.call('ZREM', LEASES_KEY, item.request_id) end  -- a lease's
      local money_key = key(KEY.money, owner)
      local held = redis.call('HGET', money_key, item.request_id)
      if held then
        redis.call('HDEL', money_key, item.request_id)
        redis.call('HINCRBY', money_key, F.money.total, -tonumber(held))
      end
    end
    local day_key = key(KEY.day, owner, day)
    day_moves[day_key] = (day_moves[day_key] or 0) + input + output - reserved_in - reserved_out

    local s = org_buckets(owner)
    local unused_out, unused_in = reserved_out - output, reserved_in - prefill
    if not s.apart then unused_out, unused_in = unused_out + unused_in, 0 end
    local finished, age = tonumber(item.finished_ms), 0
    if not reserved and finished > 0 then age = math.max(0, now - finished) end
    headroom_changed = buckets_settle(s.output, still_owed(unused_out, s.output.g.rate, age),
                                      borrowed_out, guaranteed_out, free_burst_out)
                       or headroom_changed
    if s.apart then
      headroom_changed = buckets_settle(s.input, still_owed(unused_in, s.input.g.rate, age),
                                        borrowed_in, guaranteed_in, free_burst_in)
                         or headroom_changed
    end

    -- The key's own slice: settled like its reservation debited it, or, without one, debited
    -- if the key has a slice.
    local sliced = reserved and r[6] == '1'
    if key_id > 0 and not reserved then
      if sliced_keys[key_id] == nil then
        sliced_keys[key_id] = redis.call('EXISTS', key(KEY.key_slice, key_id)) == 1
      end
      sliced = sliced_keys[key_id]
    end
    if sliced then
      local k = key_slice(key_id)
      key_bucket_settle(k.output, still_owed(unused_out, k.output.rate, age))
      key_bucket_settle(k.input, still_owed(unused_in, k.input.rate, age))
      if day == k.day then k.day_used = k.day_used - unused_out - unused_in end
      if reserved then redis.call('ZREM', key(KEY.key_inflight, key_id), item.request_id) end
    end

    if item.completed == '1' then
      observe(histogram(owner, nil), output)
      if key_id > 0 then observe(histogram(owner, key_id), output) end
    end

    redis.call('HSET', item.key, F.res.org, owner, F.res.state, 'settled')
    redis.call('PEXPIRE', item.key, record_ttl)
    settled = settled + 1
  end
end

for day_key, move in pairs(day_moves) do
  redis.call('INCRBY', day_key, move)
  redis.call('PEXPIRE', day_key, 2 * DAY_MS)
end
for org, s in pairs(orgs) do
  local input = s.input or {}
  org_levels_write(key(KEY.org, org), s.output.g.level, s.output.b.level,
                   input.g and input.g.level, input.b and input.b.level, s.output.g.at)
end
if headroom_changed then
  headroom_levels_write(headroom.output.level, headroom.input.level, headroom.output.at)
end
for key_id, k in pairs(keys) do key_slice_write(key_id, k) end
for hkey, h in pairs(histograms) do
  local fields = {F.hist.count, h.n, F.hist.base, h.z, F.hist.total, h.total}
  for index, weight in pairs(h.weights) do
    fields[#fields + 1] = index
    fields[#fields + 1] = weight
  end
  if #h.dropped > 0 then redis.call('HDEL', hkey, unpack(h.dropped)) end
  redis.call('HSET', hkey, unpack(fields))
  redis.call('PEXPIRE', hkey, estimate_ttl)
  -- The estimate authorize reads beside the org's limits; none until there is enough history
  -- (a histogram forgotten after a long idle starts again).
  local field = h.key_id and (F.est.key_prefix .. h.key_id) or F.est.org
  if h.n >= min_samples then
    redis.call('HSET', key(KEY.org, h.owner), field, p95(h))
  else
    redis.call('HDEL', key(KEY.org, h.owner), field)
  end
end
waiters_tell(A.now_ms)  -- refunds and freed slots
return settled
