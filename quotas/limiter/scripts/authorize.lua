-- Decide one request atomically: every limit passes and every limit is debited, or nothing is.
--
-- KEYS (K): AuthorizeKeys, ARGV (A): AuthorizeArgs, reply: Decision (quotas/limiter/schema.py).
-- The org's keys are derived from the pool's tag: the org is known only after the key lookup.
--
-- The request reserves its input tokens and an estimate of its output: the smaller of its
-- max_output_tokens and the p95 of the output lengths recently observed for its key (with
-- enough history) or org in this pool (settle keeps it), never below the pool's floor, and the
-- pool's default before the org has history. Settle debits any overshoot and refunds the rest.
-- A.now_ms itself, not `now`, is what goes back to Redis: a string needs no formatting.
local now, input = tonumber(A.now_ms), tonumber(A.input_tokens)
local max_output = tonumber(A.max_output_tokens)
local ttl = tonumber(A.ttl_ms)
local dry = A.dry_run == '1'
-- A lease (renewed by heartbeat: lease_update.lua) lives the pool's lease TTL (A.ttl_ms).
local lease, lease_mapped = #A.lease_owner > 0, 0

local entry = redis.call('HGET', K.registry, A.digest)
if not entry then
  -- Without the marker the registry may simply be gone (Redis flushed or restarted).
  if redis.call('EXISTS', K.synced) == 0 then return reply{outcome = 'unsynced'} end
  return reply{outcome = 'invalid_api_key'}
end
-- An entry written before keys had tiers and slices ends after the expiry.
local org, key_id, key_expires, key_tier, sliced = string.match(
  entry, '^(%d+):(%d+):(%d+):?(%a*):?(%d?)$')
if tonumber(key_expires) > 0 and tonumber(key_expires) <= now then
  return reply{outcome = 'invalid_api_key'}
end
local org_id, api_key_id = tonumber(org), tonumber(key_id)
if #key_tier == 0 then key_tier = 'auto' end  -- an entry written before keys had tiers
local function refuse(outcome)
  return reply{outcome = outcome, org_id = org_id, api_key_id = api_key_id, key_tier = key_tier}
end

-- The service tier: what the request asked for, else the key's default. A pool of another tier
-- answers tier_mismatch and the caller routes to one that serves it; so does a caller that
-- chose this pool from a stale belief about the key's default.
local tier = A.tier
if tier == 'auto' then
  if A.key_tier ~= 'unknown' and A.key_tier ~= key_tier then return refuse('tier_mismatch') end
  tier = key_tier
end
if (tier == 'priority' and A.pool_tier ~= 'fast')
    or (tier == 'default' and A.pool_tier == 'fast') then
  return refuse('tier_mismatch')
end

-- The org's state, packed limits and prices (_common.lua), spend cap, output estimates and
-- packed bucket levels (_buckets.lua).
local org_key = key(KEY.org, org)
local o = redis.call('HMGET', org_key, F.org.status, F.org.suspension_reason,
                     F.org.has_allocation, F.layout.limits, F.org.spend_cap, F.est.org,
                     F.est.key_prefix .. key_id, F.layout.levels)
if not o[1] then return reply{outcome = 'unsynced'} end
if o[1] ~= 'active' then
  if o[2] == 'payment' then return refuse('payment_required') end
  return refuse('org_not_active')
end
if o[3] ~= '1' then return refuse('no_allocation') end
local daily, conc, gr, gc, br, bc, igr, igc, ibr, ibc, input_price, output_price, next_at =
  org_limits_unpack(o[4], org_key)
local g_level, b_level, gi_level, bi_level, stored_at = org_levels_unpack(o[8], org_key)
if next_at and next_at > 0 and now >= next_at then  -- a booking's edge: its limits from now on
  local packed, levels
  packed, levels, stored_at = limits_switch(org_key, o[4], {g_level, b_level, gi_level,
                                            bi_level}, stored_at, now, 2, 4)
  g_level, b_level, gi_level, bi_level = levels[1], levels[2], levels[3], levels[4]
  daily, conc, gr, gc, br, bc, igr, igc, ibr, ibc, input_price, output_price =
    org_limits_unpack(packed, org_key)
end
local spend_cap = num(o[5], 0)

local previous_org, previous_cost, previous_input, previous_state = unpack(redis.call(
  'HMGET', K.reservation, F.res.org, F.res.cost, F.res.input, F.res.state))
if previous_org and previous_org ~= org then return refuse('request_id_conflict') end
if previous_state == 'spilled' then return refuse('spilled') end

-- The pool's headroom as stored (_buckets.lua): h for output, hi for input.
local h_rate, h_capacity, hi_rate, hi_capacity, estimate_default, estimate_floor, h_level,
      hi_level, stored_h_at = pool_headroom_read(now)
local output
if previous_org then
  input = num(previous_input, tonumber(previous_cost))
  output = tonumber(previous_cost) - input
else
  -- A pool published before estimates existed has no default: reserve max_output_tokens.
  local estimate = num(o[7], false) or num(o[6], false) or estimate_default
  if estimate then
    estimate = math.max(estimate, estimate_floor or 0)
    output = (max_output >= 0 and max_output < estimate) and max_output or estimate
  else
    output = math.max(max_output, 0)
  end
end
local total = input + output

-- The buckets, refilled to now (_buckets.lua), in locals, not tables (a dozen tables a call
-- would cost Redis ~3,000 instructions each): of the output dimension the org's guaranteed (g)
-- and burst (b) buckets and the pool's headroom (h), of the input dimension gi, bi and hi. Of
-- each its rate and capacity (the names of the org's limits), level, and the refill its
-- capacity cut off since the last write (_over), which only the burst and headroom need.
local levels_at, h_at, b_over, bi_over, h_over, hi_over, h_missing, hi_missing, _
g_level, levels_at = refill(gr, gc, g_level, stored_at, now)
b_level, _, b_over = refill(br, bc, b_level, stored_at, now)
local apart = igr > 0
if apart then
  gi_level = refill(igr, igc, gi_level, stored_at, now)
  bi_level, _, bi_over = refill(ibr, ibc, bi_level, stored_at, now)
else  -- no input dimension: none is kept
  gi_level, bi_level = nil, nil
end
h_level, h_at, h_over, h_missing = refill(h_rate, h_capacity, h_level, stored_h_at, now)
hi_level, _, hi_over, hi_missing = refill(hi_rate, hi_capacity, hi_level, stored_h_at, now)
local cost_output, cost_input = output, input
if not apart then cost_output, cost_input = total, 0 end
local k = nil
if sliced == '1' then k = key_slice_read(key_id, now, A.day) end

local inflight_key, day_key = key(KEY.inflight, org), key(KEY.day, org, A.day)
local active = redis.call('ZCOUNT', inflight_key, '(' .. A.now_ms, '+inf')
local used = num(redis.call('GET', day_key), 0)
local key_inflight, key_active = nil, 0
if k then key_inflight = key(KEY.key_inflight, key_id) end
if k and k.conc > 0 then
  key_active = redis.call('ZCOUNT', key_inflight, '(' .. A.now_ms, '+inf')
end

-- Money: with a spend cap, the request holds its worst-case price (estimate x price, premium
-- included) until settled or expired, against cap - month to date - money held.
local money_key, money = nil, 0
if spend_cap > 0 and not previous_org then
  money_key = key(KEY.money, org)
  money = math.ceil((input * input_price + output * output_price) / 1000000)
  local expired = redis.call('ZRANGEBYSCORE', inflight_key, '-inf', A.now_ms, 'LIMIT', 0, 500)
  if #expired > 0 then  -- the expired reservations' money is free again
    local freed = 0
    for _, held in ipairs(redis.call('HMGET', money_key, unpack(expired))) do
      freed = freed + num(held, 0)
    end
    redis.call('HDEL', money_key, unpack(expired))
    redis.call('HINCRBY', money_key, F.money.total, -freed)
    redis.call('ZREM', inflight_key, unpack(expired))
  end
  local spent = num(redis.call('GET', key(KEY.spend, org, A.month)), 0)
  local room = spend_cap - spent - num(redis.call('HGET', money_key, F.money.total), 0)
  if room <= 0 or money > room then return refuse('spend_cap_reached') end
end

local function oldest_expiry(zset)  -- when the next slot frees (its reservation expires)
  local oldest = redis.call('ZRANGEBYSCORE', zset, '(' .. A.now_ms, '+inf', 'WITHSCORES',
                            'LIMIT', 0, 1)
  if oldest[2] then return tonumber(oldest[2]) - now end
  return 0
end
local conc_reset, key_conc_reset = 0, 0
if active >= conc then conc_reset = oldest_expiry(inflight_key) end
if k and k.conc > 0 and key_active >= k.conc then key_conc_reset = oldest_expiry(key_inflight) end
local day_reset = DAY_MS - now % DAY_MS  -- until 00:00 UTC

-- How one dimension (its guaranteed, burst and headroom buckets) pays `cost`: while the
-- org's guaranteed bucket drains (it is not full), first the refill the pool's headroom bucket
-- would lose to its capacity since its last write (it sat full, nobody borrowing: taking it
-- deprives no one), within the org's burst; then the guaranteed bucket; then borrowed from
-- the burst and the headroom together. Returns 'allowed', nil and what it takes: free (of
-- which free_burst from the burst's level), from the guaranteed bucket, borrowed; or the
-- refusal and its retry (nil: waiting cannot help).
local function plan(cost, g_rate, g_capacity, g_level, b_rate, b_capacity, b_level, b_over,
                    h_rate, h_level, h_over)
  local free = 0
  if g_level < g_capacity then free = math.min(cost, h_over, b_over + math.max(b_level, 0)) end
  local free_burst = math.max(0, free - b_over)  -- what the burst's level pays of it
  local from_guaranteed = math.min(cost - free, math.max(g_level, 0))
  local borrow = cost - free - from_guaranteed
  if borrow > 0 and borrow > math.max(b_level - free_burst, 0) then
    local retry = nil  -- a request larger than the buckets never fits
    if cost <= g_capacity + b_capacity then  -- a debt (negative level) is repaid first
      retry = math.ceil((cost - g_level - math.max(b_level, 0)) * 1000
                        / math.max(g_rate + b_rate, 1))
    end
    return 'tps_exceeded', retry
  end
  if borrow > 0 and borrow > math.max(h_level, 0) then
    if h_rate > 0 then
      return 'pool_capacity_exhausted', math.ceil((borrow - math.max(h_level, 0)) * 1000 / h_rate)
    end
    return 'pool_capacity_exhausted', math.ceil((cost - g_level) * 1000 / math.max(g_rate, 1))
  end
  return 'allowed', nil, free, free_burst, from_guaranteed, borrow
end

local function key_fits(b, cost)  -- a key's own bucket of one dimension (rate 0: no limit)
  if b.rate == 0 or cost <= math.max(b.level, 0) then return true, nil end
  if cost > b.capacity then return false, nil end
  return false, math.ceil((cost - b.level) * 1000 / b.rate)
end

local outcome, retry, scope, limit = 'allowed', nil, nil, nil  -- retry nil: waiting cannot help
-- What each dimension takes (plan), nothing until planned.
local o_free, o_free_burst, o_guaranteed, o_borrow = 0, 0, 0, 0
local i_free, i_free_burst, i_guaranteed, i_borrow = 0, 0, 0, 0
if previous_org then
  outcome = 'duplicate'
elseif active >= conc then
  outcome, retry, scope = 'concurrency_exceeded', math.max(1, math.min(conc_reset, 1000)), 'org'
elseif k and k.conc > 0 and key_active >= k.conc then
  outcome, retry, scope = 'concurrency_exceeded', math.max(1, math.min(key_conc_reset, 1000)),
                          'key'
elseif used + total > daily then
  outcome, retry, scope = 'daily_quota_exhausted', day_reset, 'org'
elseif k and k.daily > 0 and k.day_used + total > k.daily then
  outcome, retry, scope = 'daily_quota_exhausted', day_reset, 'key'
else
  local fits
  outcome, retry, o_free, o_free_burst, o_guaranteed, o_borrow = plan(
    cost_output, gr, gc, g_level, br, bc, b_level, b_over, h_rate, h_level, h_over)
  scope, limit = 'org', 'output'
  if outcome == 'allowed' and k then
    fits, retry = key_fits(k.output, cost_output)
    if not fits then outcome, scope = 'tps_exceeded', 'key' end
  end
  if outcome == 'allowed' then
    if apart then
      outcome, retry, i_free, i_free_burst, i_guaranteed, i_borrow = plan(
        cost_input, igr, igc, gi_level, ibr, ibc, bi_level, bi_over, hi_rate, hi_level, hi_over)
    end
    scope, limit = 'org', 'input'
    if outcome == 'allowed' and k then
      fits, retry = key_fits(k.input, cost_input)
      if not fits then outcome, scope = 'tps_exceeded', 'key' end
    end
    if outcome == 'allowed' then scope, limit = nil, nil end
  end
end

if outcome == 'allowed' then
  g_level = g_level - o_guaranteed
  b_level = b_level - o_borrow - o_free_burst
  h_level = h_level - o_borrow
  -- The headroom's overflow is measured from its last write: write it when it was taken (or
  -- the next caller would take it again) and when it was missing (or none would be).
  local headroom_changed = o_borrow > 0 or o_free > 0 or h_missing
  if apart then
    gi_level = gi_level - i_guaranteed
    bi_level = bi_level - i_borrow - i_free_burst
    hi_level = hi_level - i_borrow
    headroom_changed = headroom_changed or i_borrow > 0 or i_free > 0 or hi_missing
  end
  used, active = used + total, active + 1
  if k then  -- a bucket without a rate of its own is no limit, and keeps no debt
    if k.output.rate > 0 then k.output.level = k.output.level - cost_output end
    if k.input.rate > 0 then k.input.level = k.input.level - cost_input end
    k.day_used, key_active = k.day_used + total, key_active + 1
  end
  if not dry then
    -- Integers go to Redis as strings: Redis formats every number argument with %.17g, about
    -- 4,000 instructions each (callgrind, bench/README.md); string.format('%d') is a fraction.
    -- Only whole numbers: token counts, times and TTLs (bucket levels travel packed, _buckets.lua).
    local expires, slot_ttl = string.format('%d', now + ttl), string.format('%d', ttl + DAY_MS)
    local total_text = string.format('%d', total)
    org_levels_write(org_key, g_level, b_level, gi_level, bi_level, levels_at)
    if headroom_changed then headroom_levels_write(h_level, hi_level, h_at) end
    -- A new day's counter gets its expiry.
    if redis.call('INCRBY', day_key, total_text) == total then
      redis.call('PEXPIRE', day_key, 2 * DAY_MS)
    end
    redis.call('ZREMRANGEBYSCORE', inflight_key, '-inf', A.now_ms)
    redis.call('ZADD', inflight_key, expires, A.request_id)
    redis.call('PEXPIRE', inflight_key, slot_ttl)
    -- The record, kept for hours: what every reservation has, then only where it has them
    -- what it took besides its guaranteed bucket (absent: nothing) and whether its key has a
    -- slice: more calls for the few, no table of arguments for the many.
    if lease then  -- and in the pool's leases by expiry, which the sweep claims from
      redis.call('HSET', K.reservation, F.res.org, org, F.res.api_key, key_id, F.res.cost,
                 total_text, F.res.input, string.format('%d', input), F.res.day, A.day,
                 F.res.expires, expires, F.res.lease_owner, A.lease_owner,
                 F.res.output_bound, A.max_output_tokens, F.res.started, A.now_ms)
      redis.call('ZADD', LEASES_KEY, expires, A.request_id)
      -- Its id leads to it, if the caller signed it for this org and key (else lease_map).
      if A.lease_for == org .. '.' .. key_id then
        redis.call('SET', key(KEY.lease_id, A.lease_id), A.request_id, 'PX', A.record_ttl_ms)
        lease_mapped = 1
      end
    else
      redis.call('HSET', K.reservation, F.res.org, org, F.res.api_key, key_id, F.res.cost,
                 total_text, F.res.input, string.format('%d', input), F.res.day, A.day,
                 F.res.expires, expires)
    end
    if o_borrow > 0 or o_free > 0 or i_borrow > 0 or i_free > 0 then  -- settle's to give back
      redis.call('HSET', K.reservation, F.res.taken, cmsgpack.pack(
        o_borrow, o_guaranteed, o_free_burst, i_borrow, apart and i_guaranteed or nil,
        i_free_burst))
    end
    redis.call('PEXPIRE', K.reservation, A.record_ttl_ms)
    if k then
      redis.call('HSET', K.reservation, F.res.key_slice, '1')
      key_slice_write(key_id, k)
      redis.call('ZREMRANGEBYSCORE', key_inflight, '-inf', A.now_ms)
      redis.call('ZADD', key_inflight, expires, A.request_id)
      redis.call('PEXPIRE', key_inflight, slot_ttl)
    end
    if money > 0 then
      redis.call('HSET', money_key, A.request_id, string.format('%d', money))
      redis.call('HINCRBY', money_key, F.money.total, string.format('%d', money))
      redis.call('PEXPIRE', money_key, slot_ttl)
    end
  end
end

-- Headers: limit, remaining, reset ms per limit, the tighter of the org's and the key's
-- (three values, not a table: nothing for the script's garbage collector).
local function org_view(g_rate, g_capacity, g_level, b_rate, b_capacity, b_level)
  local reset = 0
  if g_rate > 0 then reset = math.max(reset, (g_capacity - g_level) * 1000 / g_rate) end
  if b_rate > 0 then reset = math.max(reset, (b_capacity - b_level) * 1000 / b_rate) end
  return g_capacity + b_capacity, math.floor(math.max(g_level, 0) + math.max(b_level, 0)),
         math.ceil(reset)
end
local function key_view(b)
  return b.capacity, math.floor(math.max(b.level, 0)),
         math.ceil((b.capacity - b.level) * 1000 / b.rate)
end
local function tighter(limit, remaining, reset, key_limit, key_remaining, key_reset)
  if key_remaining < remaining then return key_limit, key_remaining, key_reset end
  return limit, remaining, reset
end
-- Input and output apart only where they are metered apart (else 0, 0, 0: one bucket meters
-- both, and the combined tokens headers say it all).
local out_limit, out_remaining, out_reset = org_view(gr, gc, g_level, br, bc, b_level)
if k and k.output.rate > 0 then
  out_limit, out_remaining, out_reset = tighter(out_limit, out_remaining, out_reset,
                                                key_view(k.output))
end
local in_limit, in_remaining, in_reset = 0, 0, 0
local tokens_limit, tokens_remaining, tokens_reset = out_limit, out_remaining, out_reset
if apart then
  in_limit, in_remaining, in_reset = org_view(igr, igc, gi_level, ibr, ibc, bi_level)
  if k and k.input.rate > 0 then
    in_limit, in_remaining, in_reset = tighter(in_limit, in_remaining, in_reset,
                                               key_view(k.input))
  end
  -- The combined tokens headers: whichever of input and output has the smaller share left.
  if in_remaining * out_limit < out_remaining * in_limit then
    tokens_limit, tokens_remaining, tokens_reset = in_limit, in_remaining, in_reset
  end
end
local day_limit, day_remaining = daily, math.max(0, daily - used)
local requests_limit, requests_remaining = conc, math.max(0, conc - active)
if k and k.daily > 0 then
  day_limit, day_remaining = tighter(day_limit, day_remaining, day_reset, k.daily,
                                     math.max(0, k.daily - k.day_used), day_reset)
end
if k and k.conc > 0 then
  requests_limit, requests_remaining, conc_reset = tighter(
    requests_limit, requests_remaining, conc_reset, k.conc, math.max(0, k.conc - key_active),
    key_conc_reset)
end

return reply{
  outcome = outcome, org_id = org_id, api_key_id = api_key_id, key_tier = key_tier,
  reserved_tokens = total, reserved_input_tokens = input, reserved_output_tokens = output,
  retry_after_ms = retry,
  scope = scope, limit = limit,
  tokens_limit = tokens_limit, tokens_remaining = tokens_remaining,
  tokens_reset_ms = tokens_reset,
  input_limit = in_limit, input_remaining = in_remaining, input_reset_ms = in_reset,
  output_limit = out_limit, output_remaining = out_remaining, output_reset_ms = out_reset,
  day_limit = day_limit, day_remaining = day_remaining, day_reset_ms = day_reset,
  requests_limit = requests_limit, requests_remaining = requests_remaining,
  requests_reset_ms = conc_reset, lease_ttl_ms = lease and ttl or 0,
  lease_mapped = lease_mapped,
}
