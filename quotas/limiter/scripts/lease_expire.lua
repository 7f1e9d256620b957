-- Claim the pool's due leases (expired, or released without usage for the grace), oldest first,
-- at most A.limit: a range of a sorted set, never a scan. The sweep (metering/leases.py) bills
-- and settles each. A claim marks it expired and due again A.claim_ms later, not removed: a
-- sweep dying before its commit loses nothing (recording is idempotent).
-- KEYS (K): LeaseExpireKeys; ARGV (A): LeaseExpireArgs (schema.py); an ExpiredLease reply per
-- lease. The reservations' keys are derived from the pool's tag: same slot, Cluster-safe.
local due = redis.call('ZRANGEBYSCORE', K.leases, '-inf', A.now_ms, 'LIMIT', 0, tonumber(A.limit))
local again = string.format('%d', tonumber(A.now_ms) + tonumber(A.claim_ms))
local out = {}
for _, request_id in ipairs(due) do
  local record = key(KEY.reservation, request_id)
  local org, key_id, cost, input, progress, progress_at, started, state, day, sliced = unpack(
    redis.call('HMGET', record, F.res.org, F.res.api_key, F.res.cost, F.res.input,
               F.res.progress, F.res.progress_at, F.res.started, F.res.state, F.res.day,
               F.res.key_slice))
  if not org or state == 'settled' or state == 'spilled' then
    redis.call('ZREM', K.leases, request_id)  -- settled meanwhile, or its record is gone
  else
    if state ~= 'expired' then
      redis.call('HSET', record, F.res.state, 'expired', F.res.lease_expired, '1')
      redis.call('ZREM', key(KEY.inflight, org), request_id)  -- no longer counted anyway
      if sliced == '1' then redis.call('ZREM', key(KEY.key_inflight, key_id), request_id) end
    end
    redis.call('ZADD', K.leases, again, request_id)
    out[#out + 1] = reply{request_id = request_id, org_id = tonumber(org),
                          api_key_id = num(key_id, 0), input_tokens = num(input, tonumber(cost)),
                          output_tokens = num(progress, 0), started_ms = num(started, 0),
                          progress_ms = num(progress_at, num(started, 0)), day = day}
  end
end
return out
