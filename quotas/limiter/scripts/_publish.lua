-- Shared by the publishing scripts (org_publish, pool_publish): not loaded by authorize, whose
-- every call would define it for nothing (a function costs a script ~500 instructions a call).

-- Publishes keep the hashes authorize reads many fields of (an org's, a pool's) in Redis's
-- hashtable encoding (schema.py, LayoutFields): a value longer than hash-max-listpack-value.
local function hashtable_keep(k)
  redis.call('HSET', k, F.layout.hashtable, string.rep(' ', 128))
end
