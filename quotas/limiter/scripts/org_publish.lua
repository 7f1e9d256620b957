-- Replace one org's state in one pool: status, limits, and its API-key digests.
--
-- KEYS: {p}:keys
-- ARGV: org, status, suspension_reason, has_allocation ("1"/"0"), gr, gc, br, bc, daily, conc,
--       spend cap, pool headroom rate, pool headroom capacity, day (YYYYMMDD),
--       day tokens already recorded, month (YYYYMM), month-to-date spend (micro-dollars, as
--       billing rated it), then pairs (digest, "org:key_id:expires_ms")
local org = ARGV[1]
local okeys = key('okeys', org)
local old = redis.call('SMEMBERS', okeys)
for i = 1, #old, 1000 do
  redis.call('HDEL', KEYS[1], unpack(old, i, math.min(i + 999, #old)))
end
redis.call('DEL', okeys)
for i = 18, #ARGV, 2 do
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
-- The month's spend counter is raised to what billing has rated, never lowered: it rebuilds a
-- flushed counter and repairs increments lost while Redis was unreachable. (The live counter
-- rounds each batch up, so it is normally at or above the rated figure.)
local spend = key('spend', org, ARGV[16])
if num(redis.call('GET', spend), -1) < tonumber(ARGV[17]) then
  redis.call('SET', spend, ARGV[17], 'EX', 40 * 86400)
end
return #ARGV - 17
