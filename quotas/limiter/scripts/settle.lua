-- Settle finished requests of one pool, idempotently by request_id: refund what a reservation
-- did not use (or debit the excess), free its concurrency slot, and count usage that had no
-- reservation (expired, or admitted while failing open).
--
-- KEYS: {p}:keys
-- ARGV: now_ms, day (YYYYMMDD), record ttl ms, then triples (request_id, org, actual tokens)
local now, today, record_ttl = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local settled = 0

local function bucket_adjust(org, delta, borrowed)
  local s = buckets_read(org, now)
  if delta > 0 then
    s.g = s.g - delta  -- excess over the reservation: a debt the guaranteed rate pays back
  else
    local refund = -delta
    local to_burst = math.min(refund, borrowed)
    s.b = math.min(s.bc, s.b + to_burst)
    s.h = math.min(s.hc, s.h + to_burst)
    s.g = math.min(s.gc, s.g + refund - to_burst)
  end
  buckets_write(org, s, now)
end

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
    bucket_adjust(owner, delta, borrowed)
    redis.call('HSET', res_key, 'o', owner, 's', 'settled')
    redis.call('PEXPIRE', res_key, record_ttl)
    settled = settled + 1
  end
end
return settled
