-- Which of these request_ids does the pool hold a reservation for, and is it still live?
-- (Usage ingestion attributes events with it and flags the ones without a live reservation.)
--
-- KEYS: {p}:keys
-- ARGV: now_ms, then request_ids
-- Returns one entry per request_id: "org:key_id:live" (live 1/0), or false when unknown.
local now = tonumber(ARGV[1])
local out = {}
for i = 2, #ARGV do
  local r = redis.call('HMGET', key('res', ARGV[i]), 'o', 'k', 'x')
  if r[1] then
    local live = (r[3] and tonumber(r[3]) > now) and '1' or '0'
    out[#out + 1] = r[1] .. ':' .. (r[2] or '') .. ':' .. live
  else
    out[#out + 1] = false
  end
end
return out
