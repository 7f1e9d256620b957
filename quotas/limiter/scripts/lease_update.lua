-- Renew (heartbeat) or release the leases one gateway process holds in one pool, each answered
-- alone (docs/hook.md, Leases). Renewed: it lives the pool's lease TTL from now, with its
-- progress. Released: its slot is free at once; its usage event settles it (settle.lua), else
-- the sweep bills its progress after the release grace.
-- KEYS (K): LeaseUpdateKeys, then per item its id's signature's key (KEY.lease_id); ARGV (A):
-- LeaseUpdateArgs, then each LeaseItem (schema.py). Returns a LeaseAnswer per item. The
-- reservations' keys are derived from the pool's tag: same slot, so Cluster-safe.
local now, release = tonumber(A.now_ms), A.release == '1'
local ttl = num(redis.call('HGET', K.pool, F.pool.lease_ttl), LEASE_TTL_DEFAULT_MS)
local out = {}
for i, item in ipairs(ITEMS) do
  local request_id = redis.call('GET', item.key)
  local record = request_id and key(KEY.reservation, request_id)
  local org, state, owner, progress, bound, expires, key_id, sliced, claimed
  if record then
    org, state, owner, progress, bound, expires, key_id, sliced, claimed = unpack(redis.call(
      'HMGET', record, F.res.org, F.res.state, F.res.lease_owner, F.res.progress,
      F.res.output_bound, F.res.expires, F.res.api_key, F.res.key_slice, F.res.lease_expired))
  end
  local p, status = tonumber(item.progress), nil
  if not owner or org ~= item.org_id or num(key_id, 0) ~= tonumber(item.api_key_id) then
    status = 'unknown_lease'  -- never admitted here, long settled and forgotten, or no lease
  elseif owner ~= A.owner then
    status = 'lease_not_yours'
  elseif claimed == '1' then
    status = 'lease_expired'  -- the sweep's (settled since, or about to be)
  elseif state == 'settled' or state == 'released' then
    -- Its usage arrived, or it was released: releasing again is what was asked (idempotent);
    -- there is nothing left to renew.
    status = release and 'released' or 'unknown_lease'
  elseif tonumber(expires) <= now then
    status = 'lease_expired'  -- the sweep's to claim: exactly one of the two wins
  elseif p < num(progress, 0) then
    status = 'progress_backwards'
  elseif tonumber(bound) >= 0 and p > tonumber(bound) then
    status = 'progress_beyond_reservation'
  elseif release then
    local due = string.format('%d', now + tonumber(A.release_grace_ms))
    redis.call('HSET', record, F.res.state, 'released', F.res.progress, item.progress,
               F.res.progress_at, A.now_ms, F.res.expires, due)
    redis.call('ZREM', key(KEY.inflight, org), request_id)
    if sliced == '1' then redis.call('ZREM', key(KEY.key_inflight, key_id), request_id) end
    redis.call('ZADD', LEASES_KEY, due, request_id)
    status = 'released'
  else
    local x = string.format('%d', now + ttl)
    redis.call('HSET', record, F.res.expires, x, F.res.progress, item.progress,
               F.res.progress_at, A.now_ms)
    redis.call('PEXPIRE', record, A.record_ttl_ms)
    redis.call('PEXPIRE', item.key, A.record_ttl_ms)
    redis.call('ZADD', LEASES_KEY, x, request_id)
    redis.call('ZADD', key(KEY.inflight, org), 'XX', x, request_id)
    if sliced == '1' then
      redis.call('ZADD', key(KEY.key_inflight, key_id), 'XX', x, request_id)
    end
    status = 'renewed'
  end
  out[i] = reply{status = status, ttl_ms = status == 'renewed' and ttl or 0}
end
if release then waiters_tell(A.now_ms) end  -- slots freed
return out
