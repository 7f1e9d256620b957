"""The fleet of processes serving authorize, counted in Redis while it is up.

Each process records a heartbeat (a sorted set: process id by time); the count of those seen
within `live_ms` is what a process divides an org's guaranteed rate by when it must admit
without Redis (quotas/hook/fail_open.py).
"""

import redis

from quotas.limiter.connection import LimiterUnavailable, limiter_client
from quotas.limiter.schema import SHARED_KEY


def fleet_heartbeat(*, process_id: str, now_ms: int, live_ms: int) -> int:
    """Record this process as alive now; returns how many processes are alive (itself
    included). Raises LimiterUnavailable."""
    key = SHARED_KEY.processes
    pipe = limiter_client().pipeline(transaction=False)
    pipe.zadd(key, {process_id: now_ms})
    pipe.zremrangebyscore(key, "-inf", now_ms - live_ms)
    pipe.zcard(key)
    pipe.pexpire(key, live_ms)
    try:
        return pipe.execute()[2]
    except redis.RedisError as exc:
        raise LimiterUnavailable(str(exc)) from exc
