-- Which of these request_ids does the pool hold a reservation for, and is it still live?
-- (Usage ingestion attributes events with it and flags the ones without a live reservation.)
--
-- KEYS: one reservation key per item (ITEMS); ARGV (A): LookupArgs (quotas/limiter/schema.py).
-- Returns per item a HeldReservation reply, or false when the pool holds none.
local now = tonumber(A.now_ms)
local out = {}
for i, item in ipairs(ITEMS) do
  local r = hash_read(item.key, F.res)
  out[i] = false
  if r.org then
    local live = (r.expires and tonumber(r.expires) > now) and 1 or 0
    out[i] = reply{org_id = tonumber(r.org), api_key_id = tonumber(r.api_key), live = live}
  end
end
return out
