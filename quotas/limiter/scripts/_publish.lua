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

-- Limits packed as authorize reads them (`limits_of`, _common.lua), then the instant of their
-- next scheduled change (0: none).
local function limits_pack(values, limits_of, next_at)
  local packed = {limits_of(values)}
  packed[#packed + 1] = next_at
  return cmsgpack.pack(unpack(packed))
end

-- An org's or a pool's limits as authorize reads them: the readable fields, the same packed
-- (with the instant of their next scheduled change, 0: none), and the layout field that keeps
-- the hash in Redis's hashtable encoding (schema.py, LayoutFields: a value longer than
-- hash-max-listpack-value).
local function limits_write(k, fields, values, limits_of, next_at)
  hash_write(k, fields, values, F.layout.limits, limits_pack(values, limits_of, next_at or 0),
             F.layout.hashtable, string.rep(' ', 128))
end

-- A hash's limits and their scheduled changes (_buckets.lua: limits_switch) from `values` and
-- `schedule` ([[epoch ms, values by readable name], ...], in time order): each packed with the
-- instant of the change after it.
local function limits_schedule_write(k, fields, values, limits_of, schedule)
  limits_write(k, fields, values, limits_of, schedule[1] and schedule[1][1] or 0)
  if #schedule == 0 then
    redis.call('HDEL', k, F.layout.next_limits)
    return
  end
  local changes = {}
  for i, change in ipairs(schedule) do
    changes[i] = limits_pack(change[2], limits_of, schedule[i + 1] and schedule[i + 1][1] or 0)
  end
  redis.call('HSET', k, F.layout.next_limits, cmsgpack.pack(unpack(changes)))
end
