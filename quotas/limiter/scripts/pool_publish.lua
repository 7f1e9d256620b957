-- Set the pool's headroom: what bursts borrow from, refilled at the pool's capacity minus every
-- guarantee in force. One call for the whole pool: its orgs' own limits do not change.
--
-- KEYS (K): PoolPublishKeys; ARGV (A): PoolPublishArgs (quotas/limiter/schema.py).
hash_write(K.pool, F.pool, A)
return 1
