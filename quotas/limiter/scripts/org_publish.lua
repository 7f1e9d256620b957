-- Replace one org's state in one pool: status, limits, and its API-key digests.
--
-- KEYS: {p}:keys
-- ARGV: org, status, suspension_reason, has_allocation ("1"/"0"), gr, gc, br, bc, daily, conc,
--       spend cap, pool headroom rate, pool headroom capacity, day (YYYYMMDD),
--       day tokens already recorded, then pairs (digest, "org:key_id:expires_ms")
local org = ARGV[1]
local okeys = key('okeys', org)
local old = redis.call('SMEMBERS', okeys)
for i = 1, #old, 1000 do
  redis.call('HDEL', KEYS[1], unpack(old, i, math.min(i + 999, #old)))
end
redis.call('DEL', okeys)
for i = 16, #ARGV, 2 do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  redis.call('SADD', okeys, ARGV[i])
end
redis.call('HSET', key('org', org), 'st', ARGV[2], 'sr', ARGV[3], 'alloc', ARGV[4],
           'gr', ARGV[5], 'gc', ARGV[6], 'br', ARGV[7], 'bc', ARGV[8], 'daily', ARGV[9],
           'conc', ARGV[10], 'scap', ARGV[11])
redis.call('HSET', key('pool'), 'hr', ARGV[12], 'hc', ARGV[13])
-- After a flush the day's counter is rebuilt from recorded usage; a live counter (which also
-- holds open reservations) is never lowered.
redis.call('SET', key('day', org, ARGV[14]), ARGV[15], 'NX', 'PX', 2 * DAY_MS)
return #ARGV - 15
