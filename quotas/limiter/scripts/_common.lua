-- Shared by every script: quotas/limiter/connection.py loads it after the prelude schema.py
-- generates (ITEMS), and expands the schema's names (F, KEY, K, A) and its replies (lua_expand).
--
-- Every key of one pool carries the hash tag {p<pool_id>}, so a script touches exactly one Redis
-- Cluster slot. A script's KEYS name every key its caller can know; the keys of an org that the
-- caller cannot know (authorize learns the org from the API-key lookup, settle from each
-- reservation) are derived from the tag of its first key: same slot, so Cluster-safe.
local FIRST_KEY = KEYS[1]
local PREFIX = string.sub(FIRST_KEY, 1, string.find(FIRST_KEY, '}', 1, true))

local function key(name, part, more)  -- one concatenation: no table to build and collect
  if more then return PREFIX .. ':' .. name .. ':' .. part .. ':' .. more end
  return PREFIX .. ':' .. name .. ':' .. part
end

-- The pool's sorted set of leases (a key of no part; authorize adds to it, settle removes).
local LEASES_KEY = PREFIX .. ':' .. KEY.leases

local function num(value, default)
  if value == false or value == nil then return default end
  return tonumber(value)
end

local DAY_MS = 86400000
local LEASE_TTL_DEFAULT_MS = 15000  -- a pool published before pools had one (models.py's)

-- The limits authorize reads on every call, packed (cmsgpack: numbers stay numbers) into one
-- field of the org's hash and of the pool's (F.layout.limits) by the publishes, beside the
-- readable fields: authorize then parses no decimal strings for them (Lua's tonumber is
-- strtod, about a thousand instructions a number). These give their order: of a table by
-- readable name (a publish's values; F.org, F.pool: the stored names). The packed limits end
-- with one more value: the instant (epoch ms) of their next scheduled change, 0 for none
-- (_buckets.lua: limits_switch); a field of its own would cost every decision a lookup.
local function org_limits_of(v)
  return v.daily_tokens, v.max_concurrency, v.guaranteed_rate, v.guaranteed_capacity,
         v.burst_rate, v.burst_capacity, v.input_guaranteed_rate, v.input_guaranteed_capacity,
         v.input_burst_rate, v.input_burst_capacity, v.input_price, v.output_price
end
local function pool_limits_of(v)
  return v.headroom_rate, v.headroom_capacity, v.input_headroom_rate,
         v.input_headroom_capacity, v.estimate_default, v.estimate_floor
end

-- Fields `...` of hash `k` as numbers (`missing` for one it lacks): where a hash written before
-- its values were packed keeps them.
local function fields_read(k, missing, ...)
  local values = redis.call('HMGET', k, ...)
  for i = 1, select('#', ...) do values[i] = num(values[i], missing) end
  return unpack(values, 1, select('#', ...))
end

-- An org's limits (org_limits_of's order) and a pool's (pool_limits_of's): unpacked from
-- `packed`, or else (a hash published before they were packed; the next publish packs them)
-- read from hash `k`'s readable fields. The stored names are looked up only then.
local function org_limits_unpack(packed, k)
  if packed then return cmsgpack.unpack(packed) end
  return fields_read(k, 0, org_limits_of(F.org))
end
local function pool_limits_unpack(packed, k)  -- false for a value never published
  if packed then return cmsgpack.unpack(packed) end
  return fields_read(k, false, pool_limits_of(F.pool))
end
