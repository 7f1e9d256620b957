-- Decide one request atomically: every limit passes and every limit is debited, or nothing is.
--
-- KEYS: {p}:keys, {p}:res:<request_id>, {p}:synced
-- ARGV: key digest, request_id, cost, now_ms, day (YYYYMMDD), month (YYYYMM),
--       reservation ttl ms, dry_run ("1"/"0"), reservation record ttl ms
-- Returns {outcome} for outcomes that know no org, else
--   {outcome, org, key_id, reserved, retry_ms, tok_limit, tok_remaining, tok_reset_ms,
--    day_limit, day_remaining, conc_limit, conc_remaining, conc_reset_ms}
local keys_key, res_key, synced_key = KEYS[1], KEYS[2], KEYS[3]
local digest, rid = ARGV[1], ARGV[2]
local cost, now = tonumber(ARGV[3]), tonumber(ARGV[4])
local day, month = ARGV[5], ARGV[6]
local ttl, dry, record_ttl = tonumber(ARGV[7]), ARGV[8] == '1', tonumber(ARGV[9])

local entry = redis.call('HGET', keys_key, digest)
if not entry then
  -- Without the marker the registry may simply be gone (Redis flushed or restarted).
  if redis.call('EXISTS', synced_key) == 0 then return {'unsynced'} end
  return {'invalid_api_key'}
end
local org, key_id, key_expires = string.match(entry, '^(%d+):(%d+):(%d+)$')
if tonumber(key_expires) > 0 and tonumber(key_expires) <= now then return {'invalid_api_key'} end

local o = redis.call('HMGET', key('org', org), 'st', 'sr', 'alloc', 'daily', 'conc', 'scap',
                     'gr', 'gc', 'br', 'bc')
if not o[1] then return {'unsynced'} end
if o[1] ~= 'active' then
  if o[2] == 'payment' then return {'payment_required', org, key_id} end
  return {'org_not_active', org, key_id}
end
if o[3] ~= '1' then return {'no_allocation', org, key_id} end

local previous = redis.call('HMGET', res_key, 'o', 'c')
if previous[1] and previous[1] ~= org then return {'request_id_conflict', org, key_id} end

local scap = num(o[6], 0)
if scap > 0 and not previous[1] then
  local spent = num(redis.call('GET', key('spend', org, month)), 0)
  if spent >= scap then return {'spend_cap_reached', org, key_id} end
end

local daily, conc = num(o[4], 0), num(o[5], 0)
local inflight_key, day_key = key('inflight', org), key('day', org, day)
local active = redis.call('ZCOUNT', inflight_key, '(' .. now, '+inf')
local used = num(redis.call('GET', day_key), 0)
local s = buckets_read(org, now, {o[7], o[8], o[9], o[10]})

local conc_reset = 0
if active >= conc then  -- the next slot frees when the oldest reservation expires (or settles)
  local oldest = redis.call('ZRANGEBYSCORE', inflight_key, '(' .. now, '+inf', 'WITHSCORES',
                            'LIMIT', 0, 1)
  if oldest[2] then conc_reset = tonumber(oldest[2]) - now end
end

local take_g = math.min(cost, math.max(s.g, 0))
local rest = cost - take_g
local outcome, retry = 'allowed', 0
if previous[1] then
  outcome, cost, take_g, rest = 'duplicate', tonumber(previous[2]), 0, 0
elseif active >= conc then
  outcome, retry = 'concurrency_exceeded', math.max(1, math.min(conc_reset, 1000))
elseif used + cost > daily then
  outcome, retry = 'daily_quota_exhausted', -1
elseif rest > 0 and rest > math.max(s.b, 0) then
  outcome = 'tps_exceeded'
  if cost > s.gc + s.bc then retry = -1
  else retry = math.ceil((cost - math.max(s.g, 0) - math.max(s.b, 0)) * 1000 / (s.gr + s.br)) end
elseif rest > 0 and rest > math.max(s.h, 0) then
  outcome = 'pool_capacity_exhausted'
  if s.hr > 0 then retry = math.ceil((rest - math.max(s.h, 0)) * 1000 / s.hr)
  else retry = math.ceil((cost - math.max(s.g, 0)) * 1000 / math.max(s.gr, 1)) end
end

if outcome == 'allowed' then
  s.g, s.b, s.h = s.g - take_g, s.b - rest, s.h - rest
  used, active = used + cost, active + 1
  if not dry then
    buckets_write(org, s, rest > 0)
    redis.call('INCRBY', day_key, cost)
    redis.call('PEXPIRE', day_key, 2 * DAY_MS)
    redis.call('ZREMRANGEBYSCORE', inflight_key, '-inf', now)
    redis.call('ZADD', inflight_key, now + ttl, rid)
    redis.call('PEXPIRE', inflight_key, ttl + DAY_MS)
    redis.call('HSET', res_key, 'o', org, 'k', key_id, 'c', cost, 'g', take_g, 'b', rest,
               'd', day, 'x', now + ttl, 's', 'open')
    redis.call('PEXPIRE', res_key, record_ttl)
  end
end

local available = math.max(s.g, 0) + math.max(s.b, 0)
local reset = 0
if s.gr > 0 then reset = math.max(reset, (s.gc - s.g) * 1000 / s.gr) end
if s.br > 0 then reset = math.max(reset, (s.bc - s.b) * 1000 / s.br) end
return {outcome, org, key_id, cost, retry, s.gc + s.bc, math.floor(available), math.ceil(reset),
        daily, math.max(0, daily - used), conc, math.max(0, conc - active), conc_reset}
