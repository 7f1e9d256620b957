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

-- The scheduled changes of a hash's limits (_buckets.lua: limits_switch), from `schedule`
-- ([[epoch ms, values by readable name], ...], in time order): none clears them.
local function schedule_write(k, schedule, limits_of)
  if #schedule == 0 then
    redis.call('HDEL', k, F.layout.next_at, F.layout.next_limits)
    return
  end
  local flat = {}
  for _, change in ipairs(schedule) do
    flat[#flat + 1] = change[1]
    flat[#flat + 1] = cmsgpack.pack(limits_of(change[2]))
  end
  redis.call('HSET', k, F.layout.next_at, string.format('%d', schedule[1][1]),
             F.layout.next_limits, cmsgpack.pack(unpack(flat)))
end
