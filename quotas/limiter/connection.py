"""The admission engine's configuration, its Redis connections, and its scripts.

The engine reads no settings: whoever embeds it calls `engine_configure` first (Sluice does in
QuotasConfig.ready(), from its settings, through quotas/publish.py).

Two clients. The hot one (authorize) tells "Redis is down" from "one slow reply": connecting
may take `timeout_s` (50 ms), a reply `reply_timeout_s` (250 ms). A Redis that refuses or does
not accept the connection costs at most the first; a reply that is slow on a busy machine is
waited for up to the second instead of turning the request away. Every failure (refused, reset,
no reply in time, or an error reply such as READONLY after a failover or OOM) raises
LimiterUnavailable, and the pool's failure policy answers; a call left without a reply (or
repeated failures) opens a circuit breaker so the following requests do not each wait again,
until a probe finds Redis answering. The bulk one (settling
batches, publishing, lookups for usage ingestion) may wait longer: those calls are off the
request's critical path and carry hundreds of events.

`redis_url` may name a Redis Cluster (`redis+cluster://host:port`, any node): every key a
script touches carries its pool's hash tag, so each call runs on the one node serving that slot.
"""

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import hiredis
import redis
from redis.cluster import RedisCluster

from quotas.limiter.schema import SCRIPTS, lua_expand, lua_prelude

logger = logging.getLogger(__name__)

SCRIPTS_DIR = Path(__file__).parent / "scripts"
# The hot calls' breaker, one per process (its threads' calls and every event loop's). It opens
# after the first call left without a reply for reply_timeout_s while nothing came from Redis
# (a hung Redis: every call after it would wait as long), or after BREAKER_FAILURES other
# failures in a row (refused, reset, an error reply, a reply late behind a slow command).
# While open, every hot call fails at once and the pool's policy answers; a probe thread PINGs
# Redis every PROBE_SECONDS (each PING given reply_timeout_s) and closes it on the first
# answer. A reply that is slow but within reply_timeout_s is an answer: it never opens.
BREAKER_FAILURES = 3
PROBE_SECONDS = 0.05
CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}


@dataclass(frozen=True)
class EngineConfig:
    redis_url: str  # redis://, rediss://, or redis+cluster:// / rediss+cluster:// (any node)
    timeout_s: float = 0.05  # hot client: connecting; a Redis not accepting by then is down
    reply_timeout_s: float = 0.25  # hot client: a reply slower than this counts as down
    bulk_timeout_s: float = 2.0
    reservation_ttl_s: int = 600  # how long a reservation holds its concurrency slot
    # Called as pool_rebuild(pool_id=...) when authorize finds a pool unsynced (Redis flushed
    # or restarted): it writes the pool's state back, and authorize asks once more. None: the
    # request is refused as an unknown key.
    pool_rebuild: Callable[..., object] | None = None


_lock = threading.Lock()
_config: EngineConfig | None = None
_clients: dict[bool, redis.Redis | RedisCluster] = {}
_open = False  # the breaker
_failures = 0  # hot calls failed in a row
_generation = 0  # bumped by limiter_reset: a probe of an earlier one stops


class LimiterUnavailable(Exception):
    """Redis could not answer (down, too slow, read-only, out of memory) or the breaker is
    open."""


class SlowReply(Exception):
    """Connected and sent, but no reply within reply_timeout_s. `silent`: nothing at all came
    from Redis meanwhile (a hang); False when it answered other calls (this one was slow)."""

    def __init__(self, message: str, *, silent: bool = True):
        super().__init__(message)
        self.silent = silent


def engine_configure(config: EngineConfig) -> None:
    global _config
    with _lock:
        _config = config
    limiter_reset()


def engine_config() -> EngineConfig:
    if _config is None:
        raise RuntimeError("The admission engine is not configured: call engine_configure().")
    return _config


def redis_client_create(url: str, **options) -> redis.Redis | RedisCluster:
    """A client for `url`; a `redis+cluster://` URL gives redis-py's cluster client."""
    scheme, _, rest = url.partition("://")
    if scheme in CLUSTER_SCHEMES:
        return RedisCluster.from_url(f"{CLUSTER_SCHEMES[scheme]}://{rest}", **options)
    return redis.Redis.from_url(url, **options)


def limiter_client(*, bulk: bool = False) -> redis.Redis | RedisCluster:
    client = _clients.get(bulk)
    if client is not None:
        return client
    config = engine_config()
    with _lock:
        if bulk not in _clients:
            _clients[bulk] = redis_client_create(
                config.redis_url, decode_responses=True, health_check_interval=0,
                max_connections=64,
                socket_connect_timeout=config.bulk_timeout_s if bulk else config.timeout_s,
                socket_timeout=config.bulk_timeout_s if bulk else config.reply_timeout_s)
        return _clients[bulk]


def limiter_reset() -> None:
    """Forget the clients and close the breaker (tests that stop Redis or change its URL)."""
    global _open, _failures, _generation
    with _lock:
        for client in _clients.values():
            client.close()
        _clients.clear()
        for conn in _hot_connections:
            conn.disconnect()
        _hot_connections.clear()
        _open, _failures, _generation = False, 0, _generation + 1
    _script.cache_clear()
    for reset in _resets:
        reset()


_resets: list[Callable[[], None]] = []


def on_limiter_reset(reset: Callable[[], None]) -> None:
    """Have limiter_reset also call `reset` (aio.py closes its connections)."""
    _resets.append(reset)


# Scripts built on the engine's outside it (the admission queue): name -> builder of the source.
_BUILT_ELSEWHERE: dict[str, Callable[[], str]] = {}


def script_register(name: str, source: Callable[[], str]) -> None:
    """Run `name` like the engine's own scripts (hot and bulk clients, reloaded after a restart,
    the loops' pipelined connections); `source()` gives its whole text."""
    _BUILT_ELSEWHERE[name] = source


def script_source(name: str) -> str:
    """The prelude generated from schema.py, _common.lua and the shared parts the script uses,
    then the script itself; schema names expanded."""
    if name in _BUILT_ELSEWHERE:
        return _BUILT_ELSEWHERE[name]()
    parts = ["common", *SCRIPTS[name].shared]
    sources = [(SCRIPTS_DIR / f"_{part}.lua").read_text() for part in parts]
    body = (SCRIPTS_DIR / f"{name}.lua").read_text()
    return lua_expand(name, "\n".join((lua_prelude(name), *sources, body)))


@cache
def _script(name: str, bulk: bool = False):
    # redis-py's Script runs EVALSHA and reloads the source on NOSCRIPT (after a restart).
    return limiter_client(bulk=bulk).register_script(script_source(name))


def script_sha(name: str) -> str:
    return _script(name).sha


def script_run(name: str, *, keys: Sequence[str], args: Sequence, bulk: bool = False):
    if bulk:
        try:
            return _script_call(_script(name, bulk=True), keys, args)
        except (redis.RedisError, SlowReply) as exc:  # READONLY and OOM replies included
            raise LimiterUnavailable(str(exc)) from exc
    return _script_run_hot(name, keys=keys, args=args)


_hot = threading.local()
_hot_connections: list = []  # every thread's, closed by limiter_reset


@cache
def _is_cluster(client_class: type) -> bool:
    # Asked of the class once: redis-py's clients have typing.Protocol among their bases, and an
    # isinstance() against one takes typing's slow path (4.5 µs cold, 0.85 hot; here 1.5, 0.14).
    return issubclass(client_class, RedisCluster)


def connection_pool_for(client: redis.Redis | RedisCluster, key: str) -> redis.ConnectionPool:
    if _is_cluster(type(client)):
        # The node serving KEYS[1]'s slot: every key of the call shares its pool hash tag.
        return client.get_redis_connection(client.get_node_from_key(key)).connection_pool
    return client.connection_pool


def _hot_connection(pool: redis.ConnectionPool) -> redis.Connection:
    """This thread's own connection to `pool`'s server, kept out of the pool: a script call is
    one EVALSHA, and the pool's get and release cost more client CPU than packing, sending and
    reading a decision. (A thread uses one at a time per server; it reconnects by itself after a
    failure. Web workers' threads live as long as their process, so there are as many as
    threads, times the cluster's nodes.)"""
    conns = getattr(_hot, "conns", None)
    if conns is None:
        conns = _hot.conns = {}
    conn = conns.get(pool)
    if conn is None:
        conn = conns[pool] = pool.connection_class(**pool.connection_kwargs)
        with _lock:
            _hot_connections.append(conn)
    return conn


def _evalsha(script, keys: Sequence[str], args: Sequence):
    """EVALSHA without the client's per-command machinery (pool, retries, observability
    hooks), packed by hiredis in C: this runs once per inference request, and per pool of
    every usage batch."""
    conn = _hot_connection(connection_pool_for(script.registered_client, keys[0]))
    packed = (hiredis.pack_command(("EVALSHA", script.sha, len(keys), *keys, *args)),)
    kept = conn.is_connected
    try:
        return _sent(conn, packed)
    except redis.ConnectionError:
        if not kept:
            raise
        # A connection kept from an earlier call that the server has closed since (it
        # restarted, failed over, or dropped idle clients): the command is sent once more on
        # a new one, as the first call on it would have been. Safe twice: every script is
        # idempotent by request id (a decision made twice answers its reservation again).
        return _sent(conn, packed)


def _sent(conn: redis.Connection, packed: tuple[bytes, ...]):
    try:
        conn.send_packed_command(packed, check_health=False)
        return conn.read_response()
    except redis.TimeoutError as exc:
        conn.disconnect()  # the reply may still come: never hand this socket out again
        raise SlowReply(str(exc)) from exc
    except redis.ConnectionError:
        conn.disconnect()
        raise


def _script_call(script, keys: Sequence[str], args: Sequence):
    """EVALSHA on this thread's own connection (`_evalsha`), for a decision and for a batch
    of hundreds of settlements alike (redis-py's generic packing cost a usage batch about a
    millisecond); the client's own machinery when the script must be loaded again."""
    try:
        return _evalsha(script, keys, args)
    except (redis.exceptions.NoScriptError, redis.exceptions.AskError,
            redis.exceptions.TryAgainError, redis.exceptions.ClusterDownError):
        # Redis restarted (load the script once more), or the cluster is moving the slot:
        # the client's own machinery loads scripts and follows redirections.
        return script(keys=keys, args=args)


def _script_run_hot(name: str, *, keys: Sequence[str], args: Sequence):
    hot_breaker_check()
    try:
        reply = _script_call(_script(name), keys, args)
    except (redis.RedisError, SlowReply) as exc:
        # Connection refused or reset, no reply within reply_timeout_s, or an error reply
        # (READONLY after a failover, OOM): all of them are "Redis cannot decide", and the
        # caller's failure policy answers, never a 500.
        raise hot_call_failed(name, exc) from exc
    hot_call_answered()
    return reply


# The hot calls' circuit breaker (BREAKER_FAILURES above), shared by this module's threads and
# by the event loops of aio.py: a Redis that is down is down for both.

def hot_breaker_check() -> None:
    """Raises LimiterUnavailable while the breaker is open."""
    if _open:
        raise LimiterUnavailable("Redis did not answer: skipped until a probe finds it answering")


def hot_breaker_open() -> bool:
    return _open


def hot_call_failed(name: str, exc: Exception) -> LimiterUnavailable:
    """Count a failed hot call, open the breaker (at once for a call left without a reply),
    and return the error to raise."""
    global _failures
    _failures += 1
    hung = (exc.silent if isinstance(exc, SlowReply)
            else isinstance(exc, TimeoutError | redis.TimeoutError))
    if not _open and (hung or _failures >= BREAKER_FAILURES):
        _breaker_open()
    logger.warning("limiter: %s failed (%s): %s", name, type(exc).__name__, exc)
    return LimiterUnavailable(str(exc))


def hot_call_answered() -> None:
    """Redis answered: the breaker closes (a call in flight, or the probe, heard it)."""
    global _open, _failures
    _failures, _open = 0, False


def _breaker_open() -> None:
    global _open
    with _lock:
        if _open:
            return
        _open = True
        generation = _generation
    logger.warning("limiter: breaker open; the pools' failure policies answer until Redis does")
    threading.Thread(target=_probe, args=(generation,), name="limiter-probe",
                     daemon=True).start()


def _probe(generation: int) -> None:
    """PING Redis until it answers, then close the breaker (off every request's path)."""
    client = None
    try:
        while _open and generation == _generation:
            try:
                if client is None:
                    config = engine_config()
                    client = redis_client_create(
                        config.redis_url, socket_connect_timeout=config.timeout_s,
                        socket_timeout=config.reply_timeout_s, health_check_interval=0)
                client.ping()
            except (redis.RedisError, OSError):
                time.sleep(PROBE_SECONDS)
                continue
            if generation == _generation:
                hot_call_answered()
                logger.warning("limiter: Redis answers again; breaker closed")
            return
    finally:
        if client is not None:
            client.close()
