"""The Redis connection the admission engine uses, and its scripts.

Timeouts are short (SLUICE_REDIS_TIMEOUT_MS, 50 ms by default): a dead Redis must cost a request
at most that long before the pool's failure policy applies. A failure also opens a short circuit
breaker so the following requests do not each wait for the timeout again.
"""

import threading
import time
from functools import cache
from pathlib import Path

import redis
from django.conf import settings

SCRIPTS_DIR = Path(__file__).parent / "scripts"
# After BREAKER_FAILURES failures in a row, skip Redis for BREAKER_SECONDS and apply the
# failure policy directly: a dead Redis then costs one timeout per period, not one per request,
# while a single slow reply on a busy machine does not turn a whole burst away.
BREAKER_FAILURES = 3
BREAKER_SECONDS = 0.5

_lock = threading.Lock()
_client: redis.Redis | None = None
_broken_until = 0.0
_failures = 0


class LimiterUnavailable(Exception):
    """Redis could not be reached (or the breaker is open)."""


def limiter_client() -> redis.Redis:
    global _client
    if _client is not None:
        return _client
    with _lock:
        if _client is None:
            timeout = settings.REDIS_TIMEOUT_SECONDS
            _client = redis.Redis.from_url(
                settings.REDIS_URL, socket_timeout=timeout, socket_connect_timeout=timeout,
                health_check_interval=0, max_connections=64,
            )
        return _client


def limiter_reset() -> None:
    """Forget the client and close the breaker (tests that stop Redis or change its URL)."""
    global _client, _broken_until, _failures
    with _lock:
        if _client is not None:
            _client.close()
        _client, _broken_until, _failures = None, 0.0, 0
    _script.cache_clear()


@cache
def _script(name: str):
    common = (SCRIPTS_DIR / "_common.lua").read_text()
    body = (SCRIPTS_DIR / f"{name}.lua").read_text()
    # redis-py's Script runs EVALSHA and reloads the source on NOSCRIPT (after a restart).
    return limiter_client().register_script(common + "\n" + body)


def script_run(name: str, *, keys: list[str], args: list):
    global _broken_until, _failures
    if _broken_until and time.monotonic() < _broken_until:
        raise LimiterUnavailable("circuit open after repeated Redis failures")
    try:
        reply = _script(name)(keys=keys, args=args)
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        _failures += 1
        if _failures >= BREAKER_FAILURES:
            _broken_until = time.monotonic() + BREAKER_SECONDS
        raise LimiterUnavailable(str(exc)) from exc
    _failures, _broken_until = 0, 0.0
    return reply


def pool_tag(pool_id: int) -> str:
    return f"{{p{pool_id}}}"
