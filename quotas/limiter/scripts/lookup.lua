-- Which of these request_ids does the pool hold a reservation for, and is it still live?
-- (Usage ingestion attributes events with it and flags the ones without a live reservation.)
--
-- KEYS: one reservation key per item (ITEMS); ARGV (A): LookupArgs (quotas/limiter/schema.py).
-- Returns per item a HeldReservation reply, or false when the pool holds none (a request that
-- spilled to another pool left only a marker here).
local now = tonumber(A.now_ms)
local out = {}
for i, item in ipairs(ITEMS) do
  local org, api_key, expires, state = unpack(redis.call('HMGET', item.key, F.res.org,
                                                         F.res.api_key, F.res.expires,
                                                         F.res.state))
  out[i] = false
  if org and state ~= 'spilled' then
    local live = (expires and tonumber(expires) > now) and 1 or 0
    out[i] = reply{org_id = tonumber(org), api_key_id = tonumber(api_key), live = live}
  end
end
return out
