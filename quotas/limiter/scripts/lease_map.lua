-- Let a lease's id lead to its reservation: what authorize does itself when its caller could
-- sign the id before the decision (it knew the API key's org), else the caller's next call.
--
-- KEYS (K): LeaseMapKeys; ARGV (A): LeaseMapArgs (quotas/limiter/schema.py). Returns 1 when
-- mapped, 0 when the reservation is not a lease (or is gone).
if not redis.call('HGET', K.reservation, F.res.lease_owner) then return 0 end
redis.call('SET', K.lease_id, A.request_id, 'PX', A.record_ttl_ms)
return 1
