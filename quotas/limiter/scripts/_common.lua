-- Shared by every script (prepended by quotas/limiter/scripts.py).
--
-- All keys of one pool share the hash tag {p<pool_id>}, so a script touches exactly one Redis
-- Cluster slot. KEYS[1] is always "{p<id>}:keys"; the org-specific keys are derived from its tag
-- because the org is only known after the API-key lookup (same slot, so Cluster-safe).
local PREFIX = string.match(KEYS[1], '^({p%d+})')

local function key(...)
  return table.concat({PREFIX, ...}, ':')
end

local function num(value, default)
  if value == false or value == nil then return default end
  return tonumber(value)
end

-- A token bucket's level now, from its stored level and timestamp (a missing bucket is full),
-- and the timestamp to store. Callers pass their own clock, and a caller whose `now` is behind
-- the last write (it computed `now` first but ran second) must neither refill nor move the
-- timestamp back: that would count the same interval twice and admit more than the rate.
local function refill(level, at, rate, capacity, now)
  if level == false or level == nil then return capacity, now end
  at = tonumber(at)
  if now <= at then return tonumber(level), at end
  return math.min(capacity, tonumber(level) + (now - at) * rate / 1000), now
end

-- The org's buckets and the pool's headroom bucket, refilled to `now`. `limits` is the org's
-- {gr, gc, br, bc} when the caller has read them already.
local function buckets_read(org, now, limits)
  limits = limits or redis.call('HMGET', key('org', org), 'gr', 'gc', 'br', 'bc')
  local gr, gc = num(limits[1], 0), num(limits[2], 0)
  local br, bc = num(limits[3], 0), num(limits[4], 0)
  local tb = redis.call('HMGET', key('tb', org), 'g', 'b', 't')
  local pool = redis.call('HMGET', key('pool'), 'hr', 'hc')
  local hr, hc = num(pool[1], 0), num(pool[2], 0)
  local hb = redis.call('HMGET', key('hb'), 'l', 't')
  local g, tg = refill(tb[1], tb[3], gr, gc, now)
  local b = refill(tb[2], tb[3], br, bc, now)
  local h, th = refill(hb[1], hb[2], hr, hc, now)
  return {gr = gr, gc = gc, br = br, bc = bc, hr = hr, hc = hc, g = g, b = b, h = h,
          tg = tg, th = th}
end

local DAY_MS = 86400000

-- `headroom_changed` false skips the pool bucket: its stored level refills to the same value.
local function buckets_write(org, s, headroom_changed)
  redis.call('HSET', key('tb', org), 'g', s.g, 'b', s.b, 't', s.tg)
  redis.call('PEXPIRE', key('tb', org), DAY_MS)
  if headroom_changed then
    redis.call('HSET', key('hb'), 'l', s.h, 't', s.th)
    redis.call('PEXPIRE', key('hb'), DAY_MS)
  end
end
