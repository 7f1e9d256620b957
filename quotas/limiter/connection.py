"""The Redis connections the admission engine uses, and its scripts.

Two clients. The hot one (authorize) has short timeouts (SLUICE_REDIS_TIMEOUT_MS, 50 ms by
default): a dead Redis must cost a request at most that long before the pool's failure policy
applies, and repeated failures open a short circuit breaker so the following requests do not
each wait again. The bulk one (settling batches, syncing, lookups for usage ingestion) may wait
longer: those calls are off the request's critical path and carry hundreds of events.
"""

import threading
import time
from functools import cache
from pathlib import Path

import redis
from django.conf import settings

SCRIPTS_DIR = Path(__file__).parent / "scripts"
BULK_TIMEOUT_SECONDS = 2.0
# After BREAKER_FAILURES failures in a row, skip Redis for BREAKER_SECONDS and apply the
# failure policy directly: a dead Redis then costs one timeout per period, not one per request,
# while a single slow reply on a busy machine does not turn a whole burst away.
BREAKER_FAILURES = 3
BREAKER_SECONDS = 0.5

_lock = threading.Lock()
_clients: dict[bool, redis.Redis] = {}
_broken_until = 0.0
_failures = 0


class LimiterUnavailable(Exception):
    """Redis could not be reached (or the breaker is open)."""


def limiter_client(*, bulk: bool = False) -> redis.Redis:
    client = _clients.get(bulk)
    if client is not None:
        return client
    with _lock:
        if bulk not in _clients:
            timeout = BULK_TIMEOUT_SECONDS if bulk else settings.REDIS_TIMEOUT_SECONDS
            _clients[bulk] = redis.Redis.from_url(
                settings.REDIS_URL, socket_timeout=timeout, socket_connect_timeout=timeout,
                health_check_interval=0, max_connections=64)
        return _clients[bulk]


def limiter_reset() -> None:
    """Forget the clients and close the breaker (tests that stop Redis or change its URL)."""
    global _broken_until, _failures
    with _lock:
        for client in _clients.values():
            client.close()
        _clients.clear()
        _broken_until, _failures = 0.0, 0
    _script.cache_clear()


@cache
def _script(name: str, bulk: bool = False):
    common = (SCRIPTS_DIR / "_common.lua").read_text()
    body = (SCRIPTS_DIR / f"{name}.lua").read_text()
    # redis-py's Script runs EVALSHA and reloads the source on NOSCRIPT (after a restart).
    return limiter_client(bulk=bulk).register_script(common + "\n" + body)


def script_run(name: str, *, keys: list[str], args: list, bulk: bool = False):
    if bulk:
        try:
            return _script(name, bulk=True)(keys=keys, args=args)
        except redis.RedisError as exc:
            raise LimiterUnavailable(str(exc)) from exc
    return _script_run_hot(name, keys=keys, args=args)


def _evalsha(script, keys: list[str], args: list):
    """EVALSHA on a pooled connection, without the client's per-command machinery (retries,
    observability hooks): this runs once per inference request."""
    pool = script.registered_client.connection_pool
    conn = pool.get_connection()
    try:
        conn.send_command("EVALSHA", script.sha, len(keys), *keys, *args)
        return conn.read_response()
    except (redis.ConnectionError, redis.TimeoutError):
        conn.disconnect()
        raise
    finally:
        pool.release(conn)


def _script_run_hot(name: str, *, keys: list[str], args: list):
    global _broken_until, _failures
    if _broken_until and time.monotonic() < _broken_until:
        raise LimiterUnavailable("circuit open after repeated Redis failures")
    script = _script(name)
    try:
        try:
            reply = _evalsha(script, keys, args)
        except redis.exceptions.NoScriptError:  # Redis restarted: load the script once more
            reply = script(keys=keys, args=args)
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        _failures += 1
        if _failures >= BREAKER_FAILURES:
            _broken_until = time.monotonic() + BREAKER_SECONDS
        raise LimiterUnavailable(str(exc)) from exc
    _failures, _broken_until = 0, 0.0
    return reply


def pool_tag(pool_id: int) -> str:
    return f"{{p{pool_id}}}"
