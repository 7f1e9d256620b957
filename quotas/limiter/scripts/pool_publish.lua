-- Set the pool's own values: the headroom bursts borrow from (refilled at the pool's capacity
-- minus every guarantee in force, output and input) and the output estimate of orgs without
-- history. One call for the whole pool: its orgs' own limits do not change.
--
-- KEYS (K): PoolPublishKeys; ARGV (A): PoolPublishArgs (quotas/limiter/schema.py).
local values = {headroom_rate = tonumber(A.headroom_rate),
                headroom_capacity = tonumber(A.headroom_capacity),
                input_headroom_rate = tonumber(A.input_headroom_rate),
                input_headroom_capacity = tonumber(A.input_headroom_capacity),
                estimate_default = tonumber(A.estimate_default),
                estimate_floor = tonumber(A.estimate_floor)}
redis.call('HSET', K.pool, F.pool.headroom_rate, A.headroom_rate,
           F.pool.headroom_capacity, A.headroom_capacity,
           F.pool.input_headroom_rate, A.input_headroom_rate,
           F.pool.input_headroom_capacity, A.input_headroom_capacity,
           F.pool.estimate_default, A.estimate_default, F.pool.estimate_floor, A.estimate_floor,
           F.layout.limits, cmsgpack.pack(pool_limits_of(values)))
hashtable_keep(K.pool)
return 1
