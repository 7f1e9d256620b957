-- Shared by every script: quotas/limiter/connection.py loads it after the prelude schema.py
-- generates (ITEMS, reply), and expands the schema's names (F, KEY, K, A) in both.
--
-- Every key of one pool carries the hash tag {p<pool_id>}, so a script touches exactly one Redis
-- Cluster slot. A script's KEYS name every key its caller can know; the keys of an org that the
-- caller cannot know (authorize learns the org from the API-key lookup, settle from each
-- reservation) are derived from the tag of its first key: same slot, so Cluster-safe.
local PREFIX = string.match(KEYS[1], '^({p%d+})')

local function key(...)
  return table.concat({PREFIX, ...}, ':')
end

local function num(value, default)
  if value == false or value == nil then return default end
  return tonumber(value)
end

local DAY_MS = 86400000

-- Publishes keep the hashes authorize reads many fields of (an org's, a pool's) in Redis's
-- hashtable encoding (schema.py, LayoutFields): a value longer than hash-max-listpack-value.
local function hashtable_keep(k)
  redis.call('HSET', k, F.layout.hashtable, string.rep(' ', 128))
end
