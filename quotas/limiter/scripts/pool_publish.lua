-- Set the pool's own values: the headroom bursts borrow from (refilled at the pool's capacity
-- minus every guarantee in force, output and input) and the output estimate of orgs without
-- history, and their scheduled changes (bookings' edges). One call for the whole pool: its
-- orgs' own limits do not change.
--
-- KEYS (K): PoolPublishKeys; ARGV (A): PoolPublishArgs (quotas/limiter/schema.py).
local values = {headroom_rate = tonumber(A.headroom_rate),
                headroom_capacity = tonumber(A.headroom_capacity),
                input_headroom_rate = tonumber(A.input_headroom_rate),
                input_headroom_capacity = tonumber(A.input_headroom_capacity),
                estimate_default = tonumber(A.estimate_default),
                estimate_floor = tonumber(A.estimate_floor),
                lease_ttl = tonumber(A.lease_ttl)}
limits_schedule_write(K.pool, F.pool, values, pool_limits_of, cjson.decode(A.schedule))
return 1
