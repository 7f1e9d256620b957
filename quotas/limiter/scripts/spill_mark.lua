-- Mark a request_id as served by another pool of the same model (the fast pool refused it, the
-- standard pool admitted it), so that a retry of the same request finds its reservation there
-- instead of being admitted here a second time. Never over a reservation this pool holds.
--
-- KEYS (K): SpillMarkKeys; ARGV (A): SpillMarkArgs (quotas/limiter/schema.py). Returns 1 when
-- marked.
if redis.call('EXISTS', K.reservation) == 1 then return 0 end
redis.call('HSET', K.reservation, F.res.org, A.org, F.res.state, 'spilled')
redis.call('PEXPIRE', K.reservation, A.record_ttl_ms)
return 1
