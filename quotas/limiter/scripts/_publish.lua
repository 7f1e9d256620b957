-- Shared by the publishing scripts (org_publish, pool_publish): not loaded by authorize, whose
-- every call would define these for nothing (a function costs a script ~500 instructions a call).

-- Store every field of `fields` (readable name -> stored field) from `values` (by readable
-- name; none may be missing), and the field/value pairs `...`, in one HSET.
local function hash_write(k, fields, values, ...)
  local args = {...}
  for name, field in pairs(fields) do
    assert(values[name] ~= nil, 'no value for ' .. name)
    args[#args + 1] = field
    args[#args + 1] = values[name]
  end
  redis.call('HSET', k, unpack(args))
end

-- An org's or a pool's limits as authorize reads them: the readable fields, the same packed
-- (`limits_of`, _common.lua), and the layout field that keeps the hash in Redis's hashtable
-- encoding (schema.py, LayoutFields: a value longer than hash-max-listpack-value).
local function limits_write(k, fields, values, limits_of)
  hash_write(k, fields, values, F.layout.limits, cmsgpack.pack(limits_of(values)),
             F.layout.hashtable, string.rep(' ', 128))
end
