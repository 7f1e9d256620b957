"""One rebuild per pool at a time.

When Redis comes back empty, every authorize in a pool finds it unsynced at once. The first
takes the pool's rebuild lock (a random token under `{p}:rebuild`, with a TTL in case its holder
dies) and rebuilds; the others wait for the `synced` marker, a bounded time, instead of each
reading the whole pool from PostgreSQL again.
"""

import contextlib
import time
from collections.abc import Callable

import redis

from quotas.limiter.connection import LimiterUnavailable, limiter_client
from quotas.limiter.schema import KEY, pool_key

POLL_SECONDS = 0.01


def limiter_pool_rebuild_once(*, pool_id: int, rebuild: Callable[[], object],
                              lock_ttl_s: float, wait_s: float) -> bool:
    """Run `rebuild()` under the pool's lock, or wait up to `wait_s` for whoever holds it to
    finish. Returns True if this call rebuilt. Raises LimiterUnavailable when Redis cannot be
    asked, or when the holder did not mark the pool synced in time (it failed, or is slow):
    the caller's failure policy answers then."""
    client = limiter_client(bulk=True)
    lock = client.lock(pool_key(pool_id, KEY.rebuild), timeout=lock_ttl_s, blocking=False,
                       thread_local=False)
    try:
        acquired = lock.acquire()
    except redis.RedisError as exc:
        raise LimiterUnavailable(str(exc)) from exc
    if acquired:
        try:
            # Whoever held the lock before may have finished since this caller found the
            # pool unsynced.
            if client.exists(pool_key(pool_id, KEY.synced)):
                return False
            rebuild()
        except redis.RedisError as exc:
            raise LimiterUnavailable(str(exc)) from exc
        finally:
            # Only if the token is still ours (a Lua compare-and-delete); expired or Redis gone:
            # the TTL ends it either way.
            with contextlib.suppress(redis.RedisError):
                lock.release()
        return True
    _synced_wait(client, pool_id, wait_s)
    return False


def _synced_wait(client, pool_id: int, wait_s: float) -> None:
    synced, lock = pool_key(pool_id, KEY.synced), pool_key(pool_id, KEY.rebuild)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            # The lock first: its holder marks the pool synced before it lets go.
            is_locked, is_synced = client.exists(lock), client.exists(synced)
        except redis.RedisError as exc:
            raise LimiterUnavailable(str(exc)) from exc
        if is_synced:
            return
        if not is_locked:
            raise LimiterUnavailable(f"the rebuild of pool {pool_id} did not finish")
        if time.monotonic() >= deadline:
            raise LimiterUnavailable(f"pool {pool_id} is being rebuilt")
        time.sleep(POLL_SECONDS)
