-- Decide one request atomically: every limit passes and every limit is debited, or nothing is.
--
-- KEYS (K): AuthorizeKeys, ARGV (A): AuthorizeArgs, reply: Decision (quotas/limiter/schema.py).
-- The org's keys are derived from the pool's tag: the org is known only after the key lookup.
local cost, now = tonumber(A.cost), tonumber(A.now_ms)
local ttl, record_ttl = tonumber(A.ttl_ms), tonumber(A.record_ttl_ms)
local dry = A.dry_run == '1'

local entry = redis.call('HGET', K.registry, A.digest)
if not entry then
  -- Without the marker the registry may simply be gone (Redis flushed or restarted).
  if redis.call('EXISTS', K.synced) == 0 then return reply{outcome = 'unsynced'} end
  return reply{outcome = 'invalid_api_key'}
end
local org, key_id, key_expires = string.match(entry, '^(%d+):(%d+):(%d+)$')
if tonumber(key_expires) > 0 and tonumber(key_expires) <= now then
  return reply{outcome = 'invalid_api_key'}
end
local org_id, api_key_id = tonumber(org), tonumber(key_id)
local function refuse(outcome)
  return reply{outcome = outcome, org_id = org_id, api_key_id = api_key_id}
end

local status, suspension_reason, has_allocation, daily, conc, spend_cap,
      guaranteed_rate, guaranteed_capacity, burst_rate, burst_capacity = unpack(redis.call(
  'HMGET', key(KEY.org, org), F.org.status, F.org.suspension_reason, F.org.has_allocation,
  F.org.daily_tokens, F.org.max_concurrency, F.org.spend_cap, F.org.guaranteed_rate,
  F.org.guaranteed_capacity, F.org.burst_rate, F.org.burst_capacity))
if not status then return reply{outcome = 'unsynced'} end
if status ~= 'active' then
  if suspension_reason == 'payment' then return refuse('payment_required') end
  return refuse('org_not_active')
end
if has_allocation ~= '1' then return refuse('no_allocation') end

local previous_org, previous_cost = unpack(redis.call('HMGET', K.reservation, F.res.org,
                                                      F.res.cost))
if previous_org and previous_org ~= org then return refuse('request_id_conflict') end

spend_cap = num(spend_cap, 0)
if spend_cap > 0 and not previous_org then
  local spent = num(redis.call('GET', key(KEY.spend, org, A.month)), 0)
  if spent >= spend_cap then return refuse('spend_cap_reached') end
end

daily, conc = num(daily, 0), num(conc, 0)
local inflight_key, day_key = key(KEY.inflight, org), key(KEY.day, org, A.day)
local active = redis.call('ZCOUNT', inflight_key, '(' .. now, '+inf')
local used = num(redis.call('GET', day_key), 0)
local s = buckets_read(org, now, {guaranteed_rate, guaranteed_capacity, burst_rate,
                                  burst_capacity})
local g, b, h = s.guaranteed, s.burst, s.headroom

local conc_reset = 0
if active >= conc then  -- the next slot frees when the oldest reservation expires (or settles)
  local oldest = redis.call('ZRANGEBYSCORE', inflight_key, '(' .. now, '+inf', 'WITHSCORES',
                            'LIMIT', 0, 1)
  if oldest[2] then conc_reset = tonumber(oldest[2]) - now end
end
local day_reset = DAY_MS - now % DAY_MS  -- until 00:00 UTC

local take_g = math.min(cost, math.max(g.level, 0))
local rest = cost - take_g
local outcome, retry = 'allowed', nil  -- retry stays nil where waiting cannot help
if previous_org then
  outcome, cost, take_g, rest = 'duplicate', tonumber(previous_cost), 0, 0
elseif active >= conc then
  outcome, retry = 'concurrency_exceeded', math.max(1, math.min(conc_reset, 1000))
elseif used + cost > daily then
  outcome, retry = 'daily_quota_exhausted', day_reset
elseif rest > 0 and rest > math.max(b.level, 0) then
  outcome = 'tps_exceeded'
  if cost <= g.capacity + b.capacity then
    retry = math.ceil((cost - math.max(g.level, 0) - math.max(b.level, 0)) * 1000
                      / (g.rate + b.rate))
  end
elseif rest > 0 and rest > math.max(h.level, 0) then
  outcome = 'pool_capacity_exhausted'
  if h.rate > 0 then retry = math.ceil((rest - math.max(h.level, 0)) * 1000 / h.rate)
  else retry = math.ceil((cost - math.max(g.level, 0)) * 1000 / math.max(g.rate, 1)) end
end

if outcome == 'allowed' then
  g.level, b.level, h.level = g.level - take_g, b.level - rest, h.level - rest
  used, active = used + cost, active + 1
  if not dry then
    buckets_write(org, s, rest > 0)
    redis.call('INCRBY', day_key, cost)
    redis.call('PEXPIRE', day_key, 2 * DAY_MS)
    redis.call('ZREMRANGEBYSCORE', inflight_key, '-inf', now)
    redis.call('ZADD', inflight_key, now + ttl, A.request_id)
    redis.call('PEXPIRE', inflight_key, ttl + DAY_MS)
    redis.call('HSET', K.reservation, F.res.org, org, F.res.api_key, key_id, F.res.cost, cost,
               F.res.from_guaranteed, take_g, F.res.from_burst, rest, F.res.day, A.day,
               F.res.expires, now + ttl, F.res.state, 'open')
    redis.call('PEXPIRE', K.reservation, record_ttl)
  end
end

local reset = 0
if g.rate > 0 then reset = math.max(reset, (g.capacity - g.level) * 1000 / g.rate) end
if b.rate > 0 then reset = math.max(reset, (b.capacity - b.level) * 1000 / b.rate) end
return reply{
  outcome = outcome, org_id = org_id, api_key_id = api_key_id,
  reserved_tokens = cost, retry_after_ms = retry,
  tokens_limit = g.capacity + b.capacity,
  tokens_remaining = math.floor(math.max(g.level, 0) + math.max(b.level, 0)),
  tokens_reset_ms = math.ceil(reset),
  day_limit = daily, day_remaining = math.max(0, daily - used), day_reset_ms = day_reset,
  requests_limit = conc, requests_remaining = math.max(0, conc - active),
  requests_reset_ms = conc_reset,
}
