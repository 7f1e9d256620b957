-- Set the pool's headroom: what bursts borrow from, refilled at the pool's capacity minus every
-- guarantee in force. One call for the whole pool: its orgs' own limits do not change.
--
-- KEYS (K): PoolPublishKeys; ARGV (A): PoolPublishArgs (quotas/limiter/schema.py).
redis.call('HSET', K.pool, F.pool.headroom_rate, A.headroom_rate,
           F.pool.headroom_capacity, A.headroom_capacity)
return 1
