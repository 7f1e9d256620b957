-- The admission queue of one pool: join, pump, leave (admission/engine/queue.py says why).
--
-- KEYS (K): QueueKeys, ARGV (A): QueueArgs (admission/engine/queue.py): authorize's own KEYS
-- and ARGV first, so `authorize_run` (authorize.lua itself, built in as a function of its KEYS
-- and ARGV) decides a waiter exactly as it decides a request: every limit passes and is
-- debited, or nothing is.
--
-- A pool's queue, all under its hash tag (one Cluster slot):
--   orgs       sorted set: org -> its pass (virtual time), orgs with waiters only
--   meta       hash: seq, vt (the pass of the last org served), n, c (waiters, their tokens),
--              n:<org>, c:<org>, ck:<digest> (per org, tokens per API key)
--   deadlines  sorted set: request_id -> deadline (epoch ms)
--   defaults   hash: o:<org>, k:<key_id> -> the default wait budget (ms), written by publishes
--   qo:<org>   sorted set: API-key digest -> the arrival number of its first waiter
--   qk:<dig>   list: that key's waiters, first come first
--   qw:<rid>   hash: a waiter (a: authorize's ARGV packed, o, k, d, c: its tokens, dl, e, q,
--              s: w waiting | a admitted | r refused | x expired | l left, r: the decision)
local now = tonumber(A.now_ms)
local CHANNEL = PREFIX .. ':' .. KEY.queue_channel
local ORGS, META, DEADLINES = K.orgs, K.meta, K.deadlines
-- Refusals a wait can cure: a bucket refills, a slot frees.
local QUEUEABLE = {tps_exceeded = true, pool_capacity_exhausted = true,
                   concurrency_exceeded = true}

local function w_key(rid) return PREFIX .. ':' .. QK_WAITER .. ':' .. rid end
local function org_q(org) return PREFIX .. ':' .. QK_ORG .. ':' .. org end
local function key_q(digest) return PREFIX .. ':' .. QK_KEY .. ':' .. digest end
local function auth_keys(rid)
  return {K.registry, K.synced, K.pool, key(KEY.reservation, rid)}
end
local function own_args(dry)  -- the joining request's authorize ARGV
  local a = {}
  for i = 1, AUTHORIZE_ARGC do a[i] = ARGV[i] end
  if dry then a[AUTHORIZE_DRY] = '1' end
  return a
end
local function admits(d) return d[D_OUTCOME] == 'allowed' or d[D_OUTCOME] == 'duplicate' end

-- The org's weight: its guaranteed output tokens/s in force now, bookings included.
local function weight(org)
  local output = org_guarantee_at(key(KEY.org, org), now)
  return math.max(output or 0, 1)
end

local function unlink(rid, org, digest, cost)  -- a waiter leaves the structures
  local kq = key_q(digest)
  local head = redis.call('LINDEX', kq, 0)
  redis.call('LREM', kq, 1, rid)
  if head == rid then
    local following = redis.call('LINDEX', kq, 0)
    if following then
      redis.call('ZADD', org_q(org), redis.call('HGET', w_key(following), 'q'), digest)
    else
      redis.call('ZREM', org_q(org), digest)
      redis.call('HDEL', META, 'ck:' .. digest)
    end
  end
  if redis.call('EXISTS', kq) == 1 then redis.call('HINCRBY', META, 'ck:' .. digest, -cost) end
  redis.call('ZREM', DEADLINES, rid)
  redis.call('HINCRBY', META, 'n', -1)
  redis.call('HINCRBY', META, 'c', -cost)
  if redis.call('HINCRBY', META, 'n:' .. org, -1) <= 0 then
    redis.call('HDEL', META, 'n:' .. org, 'c:' .. org)
    redis.call('ZREM', ORGS, org)
  else
    redis.call('HINCRBY', META, 'c:' .. org, -cost)
  end
end

local function finish(rid, state, decision)  -- a waiter's outcome, kept for its process
  local w = w_key(rid)
  local v = redis.call('HMGET', w, 'o', 'd', 'c')
  unlink(rid, v[1], v[2], tonumber(v[3]))
  redis.call('HSET', w, 's', state, 'r', cjson.encode(decision))
end

local function enqueue(org, key_id, cost, deadline)
  local rid, digest = A.request_id, A.digest
  local seq = redis.call('HINCRBY', META, 'seq', 1)
  local w = w_key(rid)
  redis.call('HSET', w, 'a', cmsgpack.pack(unpack(own_args(false))), 'o', org, 'k', key_id,
             'd', digest, 'c', cost, 'dl', deadline, 'e', A.now_ms, 'q', seq, 's', 'w')
  redis.call('PEXPIRE', w, deadline - now + GRACE_MS)
  if redis.call('RPUSH', key_q(digest), rid) == 1 then
    redis.call('ZADD', org_q(org), seq, digest)
  end
  redis.call('HINCRBY', META, 'ck:' .. digest, cost)
  redis.call('ZADD', DEADLINES, deadline, rid)
  redis.call('HINCRBY', META, 'n', 1)
  redis.call('HINCRBY', META, 'c', cost)
  redis.call('HINCRBY', META, 'c:' .. org, cost)
  if redis.call('HINCRBY', META, 'n:' .. org, 1) == 1 then
    -- An org joins at the current virtual time: an idle spell earns it no credit.
    redis.call('ZADD', ORGS, num(redis.call('HGET', META, 'vt'), 0), org)
  end
end

-- Admit waiters in fair order while they fit: the org with the smallest pass first (stride
-- scheduling: each admission advances its org's pass by tokens / weight, so under contention
-- orgs are served in proportion to their guarantees), within it the key whose first waiter
-- came first. A key refused by its own slice is passed over (its org's other keys are not); an
-- org refused by its own limits or the pool's is passed over. Waiters past their deadline
-- leave first (their process may be gone). Returns what happened, as the message published.
local function pump()
  local admitted, refused, expired, next_retry = {}, {}, {}, nil
  for _, rid in ipairs(redis.call('ZRANGEBYSCORE', DEADLINES, '-inf', A.now_ms,
                                  'LIMIT', 0, 100)) do
    finish(rid, 'x', {'queue_timeout'})
    expired[#expired + 1] = rid
  end
  local tries, limit, skipped = 0, tonumber(A.pump_max), {}
  while tries < limit do
    local orgs, org, pass = redis.call('ZRANGE', ORGS, 0, 63, 'WITHSCORES'), nil, nil
    for i = 1, #orgs, 2 do
      if not skipped[orgs[i]] then org, pass = orgs[i], tonumber(orgs[i + 1]) break end
    end
    if not org then break end
    local served = false
    for _, digest in ipairs(redis.call('ZRANGE', org_q(org), 0, 15)) do
      local rid = redis.call('LINDEX', key_q(digest), 0)
      local v = redis.call('HMGET', w_key(rid), 'a', 'c')
      if not v[1] then  -- its record expired (a process gone long ago): it leaves
        redis.call('LREM', key_q(digest), 1, rid)
        redis.call('ZREM', DEADLINES, rid)
        break
      end
      local args = {cmsgpack.unpack(v[1])}
      args[AUTHORIZE_NOW], args[AUTHORIZE_DAY], args[AUTHORIZE_MONTH] = A.now_ms, A.day, A.month
      tries = tries + 1
      local d = authorize_run(auth_keys(rid), args)
      if admits(d) then
        finish(rid, 'a', d)
        admitted[rid] = d
        redis.call('HSET', META, 'vt', pass)
        if redis.call('ZSCORE', ORGS, org) then
          redis.call('ZADD', ORGS, pass + tonumber(v[2]) / weight(org), org)
        end
        served = true
        break
      elseif QUEUEABLE[d[D_OUTCOME]] then
        local retry = num(d[D_RETRY], false)
        if retry and (not next_retry or retry < next_retry) then next_retry = retry end
        if d[D_SCOPE] ~= 'key' then break end  -- the org's limits: its other keys wait too
      else  -- a wait no longer helps (the day's quota, a key revoked): answered now
        finish(rid, 'r', d)
        refused[rid] = d
        served = true
        break
      end
      if tries >= limit then break end
    end
    if not served then skipped[org] = true end
  end
  local next_at = false
  if next_retry then next_at = now + math.max(next_retry, 1) end
  -- Stopped at its limit while still deciding: the next pump at once, not at the next retry
  -- (none, when every decision admitted) or deadline.
  if tries >= limit and (next(admitted) or next(refused)) then next_at = now end
  local first = redis.call('ZRANGE', DEADLINES, 0, 0, 'WITHSCORES')
  if first[2] and (not next_at or tonumber(first[2]) < next_at) then
    next_at = tonumber(first[2])
  end
  return {a = admitted, r = refused, x = expired, n = next_at}
end

local function publish(message)
  local encoded = cjson.encode(message)
  redis.call('PUBLISH', CHANNEL, encoded)
  return encoded
end

-- When a concurrency slot frees for this request. Each in-flight request of its org (of its
-- key, for a key's slice) ends by an expected instant. A lease's: its output still to come
-- (its reserved output less its progress; past that, up to its max_output_tokens) at the rate
-- it delivered so far, first token included; before any progress, from its start, the pool's
-- TTFT ceiling and then its speed floor; overdue, that rest again from now. A plain
-- reservation's: its expiry (Sluice knows nothing else of it). The request needs a slot for
-- each request over the limit, plus one per waiter ahead of it: the ETA is the instant the
-- n-th frees, a slot freed being taken by the next waiter for as long as this request expects
-- to run. The SLOTS_READ soonest to expire are read: one not read is counted as never ending.
local SLOTS_READ = 256
local FLOOR_MS_PER_TOKEN = 1000 / math.max(tonumber(A.speed_floor_tps), 1)
local TTFT_MS = tonumber(A.ttft_ceiling_ms)

local function in_flight_end(rid, expires)
  local r = redis.call('HMGET', key(KEY.reservation, rid), F.res.lease_owner, F.res.cost,
                       F.res.input, F.res.progress, F.res.progress_at, F.res.started,
                       F.res.output_bound)
  if not r[1] then return expires end
  local p, started, cost = num(r[4], 0), tonumber(r[6]), tonumber(r[2])
  local at, rest = num(r[5], started), cost - num(r[3], cost) - p
  if rest <= 0 then  -- it outran its estimate: its bound, else another estimate's worth
    rest = tonumber(r[7]) >= 0 and tonumber(r[7]) - p or cost - num(r[3], cost)
  end
  local per_token, ends = FLOOR_MS_PER_TOKEN, nil
  if p > 0 and at > started then
    per_token = (at - started) / p
    ends = at + rest * per_token
  else
    ends = started + TTFT_MS + rest * per_token
  end
  if ends < now then ends = now + rest * per_token end
  return ends
end

local function slot_eta(d, org, key_id, digest)
  local zset, limit, ahead
  if d[D_SCOPE] == 'key' then
    zset, ahead = key(KEY.key_inflight, key_id), redis.call('LLEN', key_q(digest))
    limit = num(redis.call('HGET', key(KEY.key_slice, key_id), F.key.max_concurrency), 0)
  else
    local org_key = key(KEY.org, org)
    zset, ahead = key(KEY.inflight, org), num(redis.call('HGET', META, 'n:' .. org), 0)
    limit = select(2, org_limits_unpack(redis.call('HGET', org_key, F.layout.limits), org_key))
  end
  if limit <= 0 then return nil end
  local held = redis.call('ZRANGEBYSCORE', zset, '(' .. A.now_ms, '+inf', 'WITHSCORES',
                          'LIMIT', 0, SLOTS_READ)
  local ends = {}
  for i = 1, #held, 2 do ends[#ends + 1] = in_flight_end(held[i], tonumber(held[i + 1])) end
  if #ends == 0 then return 1 end
  table.sort(ends)
  local active = #ends
  if active == SLOTS_READ then active = redis.call('ZCOUNT', zset, '(' .. A.now_ms, '+inf') end
  local n = math.max(active - limit, 0) + ahead + 1
  local own = TTFT_MS + d[D_RESERVED_OUT] * FLOOR_MS_PER_TOKEN
  local rounds = math.floor((n - 1) / #ends)
  return math.ceil(ends[(n - 1) % #ends + 1] + rounds * own - now)
end

-- How long the org's guaranteed buckets take to hold the tokens queued in the org and the
-- request's own: from their level now, at the guaranteed rates in force (bookings included),
-- the output (or input and output metered together) and, metered apart, the input. Its burst
-- and the pool's headroom are left out: other orgs may take the headroom first, and nobody
-- takes an org's guarantee. nil: the org has no guarantee.
local function guarantee_eta(d, org)
  local org_key = key(KEY.org, org)
  local output, input = org_guarantee_at(org_key, now)
  if (output or 0) <= 0 then return nil end
  local v = redis.call('HMGET', org_key, F.layout.limits, F.layout.levels)
  local limits = {org_limits_unpack(v[1], org_key)}
  local g, _, gi, _, at = org_levels_unpack(v[2], org_key)
  local ahead = num(redis.call('HGET', META, 'c:' .. org), 0)
  local function filled(rate, capacity, level, own)
    level = refill(rate, capacity, level, at or now, now)
    return math.max(0, math.ceil((ahead + own - level) * 1000 / rate))
  end
  local apart = (input or 0) > 0 and limits[7] > 0
  local eta = filled(output, limits[4], g, apart and d[D_RESERVED_OUT] or d[D_RESERVED])
  if apart then eta = math.max(eta, filled(input, limits[8], gi, d[D_RESERVED_IN])) end
  return eta
end

-- The ETA of a request refused now. Refused by its org's TPS or the pool's capacity: when its
-- org's guarantee alone pays for it and for what is queued ahead of it in the org
-- (guarantee_eta); an org without a guarantee gets authorize's retry, an estimate (it counts
-- on the shared headroom). Refused by its key's slice: the tokens it misses in the key's
-- bucket (authorize's retry) and those queued ahead of it in the key, at the key's rate. A
-- concurrency shortfall: when its slot frees (slot_eta), and its tokens are there by then.
-- nil: it can never fit.
local function eta_of(d, org, key_id, digest)
  local retry = num(d[D_RETRY], false)
  if not retry then return nil end
  if d[D_OUTCOME] == 'concurrency_exceeded' then
    local slot = slot_eta(d, org, key_id, digest)
    return slot and math.max(slot, guarantee_eta(d, org) or 0)
  end
  if d[D_SCOPE] == 'key' then
    local r = redis.call('HMGET', key(KEY.key_slice, key_id), F.key.output_rate,
                         F.key.input_rate)
    local rate = num(d[D_LIMIT] == 'input' and r[2] or r[1], 0)
    if rate <= 0 then return retry end
    return retry + math.ceil(num(redis.call('HGET', META, 'ck:' .. digest), 0) * 1000 / rate)
  end
  return guarantee_eta(d, org) or retry
end

local rid = A.request_id
local w = w_key(rid)

if A.op == 'pump' then
  if redis.call('EXISTS', ORGS) == 0 then return {'pumped', false, 0, 0, false, false} end
  local message = pump()
  return {'pumped', false, 0, 0, message.n, publish(message)}
end

if A.op == 'leave' then  -- the waiter's deadline, or its client went away
  local v = redis.call('HMGET', w, 's', 'r')
  if v[1] == 'w' then
    finish(rid, 'l', {'left'})
    return {'left', false, 0, 0, false, false}
  end
  if v[1] == 'a' or v[1] == 'r' then return {'done', v[2], 0, 0, false, false} end
  return {'gone', false, 0, 0, false, false}
end

-- join
local v = redis.call('HMGET', w, 's', 'r', 'dl', 'o', 'k')
if v[1] == 'w' then  -- the same request again (a retry): it keeps its place
  local who = cjson.encode({'queued', tonumber(v[4]), tonumber(v[5])})
  return {'queued', who, 0, tonumber(v[3]) - now, false, false}
elseif v[1] == 'a' or v[1] == 'r' then
  return {'done', v[2], 0, 0, false, false}
end
-- Nobody waiting: authorize's own decision, which a refusal leaves unwritten. Somebody
-- waiting: a trial decision (it reserves nothing) says who asks and what holds it back, and
-- the queue's order decides.
local waiting = redis.call('EXISTS', ORGS) == 1
local d = authorize_run(auth_keys(rid), own_args(waiting))
local outcome = d[D_OUTCOME]
if (admits(d) and not waiting) or not (admits(d) or QUEUEABLE[outcome]) then
  return {'decided', cjson.encode(d), 0, 0, false, false}
end
local org, key_id = d[D_ORG], d[D_KEY]
local budget = tonumber(A.budget_ms)
if budget < 0 then  -- the key's default, else the org's, else none
  local defaults = redis.call('HMGET', K.defaults, 'k:' .. key_id, 'o:' .. org)
  budget = num(defaults[1], false) or num(defaults[2], 0)
end
budget = math.min(budget, tonumber(A.max_wait_ms))
if budget <= 0 then  -- no wait asked for: today's answer
  if waiting and admits(d) then d = authorize_run(auth_keys(rid), own_args(false)) end
  return {'decided', cjson.encode(d), 0, 0, false, false}
end
local eta = 0
if not admits(d) then
  eta = eta_of(d, org, key_id, A.digest)
  if not eta or eta > budget then
    return {'refused', cjson.encode(d), eta or -1, budget, false, false}
  end
end
local m = redis.call('HMGET', META, 'n', 'n:' .. org)
if num(m[1], 0) >= tonumber(A.pool_cap) or num(m[2], 0) >= tonumber(A.org_cap) then
  return {'full', cjson.encode(d), eta, budget, false, false}
end
enqueue(org, key_id, d[D_RESERVED], now + budget)
if admits(d) then  -- it fits now, but others wait: their order decides
  local message = pump()
  local encoded = publish(message)
  local s = redis.call('HMGET', w, 's', 'r')
  if s[1] ~= 'w' then return {'done', s[2], 0, budget, message.n, encoded} end
  return {'queued', cjson.encode(d), eta, budget, message.n, encoded}
end
return {'queued', cjson.encode(d), eta, budget, now + math.max(num(d[D_RETRY], 1), 1), false}
