"""The admission engine's configuration, its Redis connections, and its scripts.

The engine reads no settings: whoever embeds it calls `engine_configure` first (Sluice does in
QuotasConfig.ready(), from its settings, through quotas/publish.py).

Two clients. The hot one (authorize) has short timeouts (`timeout_s`, 50 ms by default): a dead
Redis must cost a request at most that long before the pool's failure policy applies, and
repeated failures open a short circuit breaker so the following requests do not each wait
again. The bulk one (settling batches, publishing, lookups for usage ingestion) may wait
longer: those calls are off the request's critical path and carry hundreds of events.
"""

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import redis

from quotas.limiter.schema import SCRIPTS, lua_expand, lua_prelude

SCRIPTS_DIR = Path(__file__).parent / "scripts"
# After BREAKER_FAILURES failures in a row, skip Redis for BREAKER_SECONDS and apply the
# failure policy directly: a dead Redis then costs one timeout per period, not one per request,
# while a single slow reply on a busy machine does not turn a whole burst away.
BREAKER_FAILURES = 3
BREAKER_SECONDS = 0.5


@dataclass(frozen=True)
class EngineConfig:
    redis_url: str
    timeout_s: float = 0.05  # the hot client's (authorize)
    bulk_timeout_s: float = 2.0
    reservation_ttl_s: int = 600  # how long a reservation holds its concurrency slot
    # Called as pool_rebuild(pool_id=...) when authorize finds a pool unsynced (Redis flushed
    # or restarted): it writes the pool's state back, and authorize asks once more. None: the
    # request is refused as an unknown key.
    pool_rebuild: Callable[..., object] | None = None


_lock = threading.Lock()
_config: EngineConfig | None = None
_clients: dict[bool, redis.Redis] = {}
_broken_until = 0.0
_failures = 0


class LimiterUnavailable(Exception):
    """Redis could not be reached (or the breaker is open)."""


def engine_configure(config: EngineConfig) -> None:
    global _config
    with _lock:
        _config = config
    limiter_reset()


def engine_config() -> EngineConfig:
    if _config is None:
        raise RuntimeError("The admission engine is not configured: call engine_configure().")
    return _config


def limiter_client(*, bulk: bool = False) -> redis.Redis:
    client = _clients.get(bulk)
    if client is not None:
        return client
    config = engine_config()
    with _lock:
        if bulk not in _clients:
            timeout = config.bulk_timeout_s if bulk else config.timeout_s
            _clients[bulk] = redis.Redis.from_url(
                config.redis_url, socket_timeout=timeout, socket_connect_timeout=timeout,
                health_check_interval=0, max_connections=64, decode_responses=True)
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


def script_source(name: str) -> str:
    """The prelude generated from schema.py, _common.lua and the shared parts the script uses,
    then the script itself; schema names expanded."""
    parts = ["common", *SCRIPTS[name].shared]
    sources = [(SCRIPTS_DIR / f"_{part}.lua").read_text() for part in parts]
    body = (SCRIPTS_DIR / f"{name}.lua").read_text()
    return lua_expand(name, "\n".join((lua_prelude(name), *sources, body)))


@cache
def _script(name: str, bulk: bool = False):
    # redis-py's Script runs EVALSHA and reloads the source on NOSCRIPT (after a restart).
    return limiter_client(bulk=bulk).register_script(script_source(name))


def script_run(name: str, *, keys: Sequence[str], args: Sequence, bulk: bool = False):
    if bulk:
        try:
            return _script(name, bulk=True)(keys=keys, args=args)
        except redis.RedisError as exc:
            raise LimiterUnavailable(str(exc)) from exc
    return _script_run_hot(name, keys=keys, args=args)


def _evalsha(script, keys: Sequence[str], args: Sequence):
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


def _script_run_hot(name: str, *, keys: Sequence[str], args: Sequence):
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
