-- Settle finished requests of one pool, idempotently by request_id: refund what a reservation
-- did not use (or debit the excess), free its concurrency slot, and count usage that had no
-- reservation (expired, or admitted while failing open). Bucket changes are summed per org and
-- written once, so a batch of 500 events costs one bucket read and write per org.
--
-- KEYS (K): SettleKeys, then one reservation key per item; ARGV (A): SettleArgs, then each
-- item's Settlement fields (ITEMS, quotas/limiter/schema.py). Returns how many were settled.
-- An org's keys are derived from the pool's tag: the owner is read from each reservation.
local now, today, record_ttl = tonumber(A.now_ms), A.day, tonumber(A.record_ttl_ms)
local settled = 0
local per_org = {}  -- org -> what its buckets get back, or owe

for _, item in ipairs(ITEMS) do
  local actual = tonumber(item.tokens)
  local reserved_by, cost, from_burst, reserved_day, state = unpack(redis.call(
    'HMGET', item.key, F.res.org, F.res.cost, F.res.from_burst, F.res.day, F.res.state))
  if state ~= 'settled' then
    local owner, day, delta, borrowed = item.org_id, today, actual, 0
    if reserved_by then
      owner, day = reserved_by, reserved_day
      delta, borrowed = actual - tonumber(cost), tonumber(from_burst)
      redis.call('ZREM', key(KEY.inflight, owner), item.request_id)
    end
    local day_key = key(KEY.day, owner, day)
    redis.call('INCRBY', day_key, delta)
    redis.call('PEXPIRE', day_key, 2 * DAY_MS)
    local acc = per_org[owner] or {excess = 0, to_burst = 0, to_guaranteed = 0}
    if delta > 0 then
      acc.excess = acc.excess + delta  -- used more than reserved: a debt the guaranteed rate repays
    else
      local to_burst = math.min(-delta, borrowed)
      acc.to_burst = acc.to_burst + to_burst
      acc.to_guaranteed = acc.to_guaranteed - delta - to_burst
    end
    per_org[owner] = acc
    redis.call('HSET', item.key, F.res.org, owner, F.res.state, 'settled')
    redis.call('PEXPIRE', item.key, record_ttl)
    settled = settled + 1
  end
end

for org, acc in pairs(per_org) do
  local s = buckets_read(org, now)
  s.burst.level = math.min(s.burst.capacity, s.burst.level + acc.to_burst)
  s.headroom.level = math.min(s.headroom.capacity, s.headroom.level + acc.to_burst)
  s.guaranteed.level = math.min(s.guaranteed.capacity, s.guaranteed.level + acc.to_guaranteed)
                       - acc.excess
  buckets_write(org, s, acc.to_burst > 0)
end
return settled
