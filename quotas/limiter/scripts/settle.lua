-- Settle finished requests of one pool, idempotently by request_id: refund what a reservation
-- did not use (or debit the excess), free its concurrency slot, and count usage that had no
-- reservation (expired, or admitted while failing open). Bucket changes are summed per org and
-- written once, so a batch of 500 events costs one bucket read and write per org.
--
-- KEYS: {p}:keys
-- ARGV: now_ms, day (YYYYMMDD), record ttl ms, then triples (request_id, org, actual tokens)
local now, today, record_ttl = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local settled = 0
local per_org = {}  -- org -> {excess, refund_to_burst, refund_to_guaranteed}

for i = 4, #ARGV, 3 do
  local rid, org, actual = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  local res_key = key('res', rid)
  local r = redis.call('HMGET', res_key, 'o', 'c', 'b', 'd', 's')
  if r[5] ~= 'settled' then
    local owner, day, delta, borrowed = org, today, actual, 0
    if r[1] then
      owner, day = r[1], r[4]
      delta, borrowed = actual - tonumber(r[2]), tonumber(r[3])
      redis.call('ZREM', key('inflight', owner), rid)
    end
    redis.call('INCRBY', key('day', owner, day), delta)
    redis.call('PEXPIRE', key('day', owner, day), 2 * DAY_MS)
    local acc = per_org[owner] or {0, 0, 0}
    if delta > 0 then
      acc[1] = acc[1] + delta  -- excess over the reservation: a debt the guaranteed rate repays
    else
      local to_burst = math.min(-delta, borrowed)
      acc[2], acc[3] = acc[2] + to_burst, acc[3] - delta - to_burst
    end
    per_org[owner] = acc
    redis.call('HSET', res_key, 'o', owner, 's', 'settled')
    redis.call('PEXPIRE', res_key, record_ttl)
    settled = settled + 1
  end
end

for org, acc in pairs(per_org) do
  local s = buckets_read(org, now)
  s.b = math.min(s.bc, s.b + acc[2])
  s.h = math.min(s.hc, s.h + acc[2])
  s.g = math.min(s.gc, s.g + acc[3]) - acc[1]
  buckets_write(org, s, acc[2] > 0)
end
return settled
