"""The production WSGI application plus two benchmark endpoints at the same layer as the
authorize fast path: /bench/empty, an empty JSON answer (the ceiling of this server and load
generator for a request that does no work), and /bench/ping, the same answer after one Redis
round trip (PING on the limiter's own per-thread connection: what the thread gives up while it
waits for Redis, without any of authorize's work), /bench/stand-in: authorize with none of
its Python (below), and /bench/no-redis: authorize with all of its Python and no Redis (below).
Benchmarks only."""

import threading

import orjson

import quotas.limiter.engine
from config.wsgi import application as sluice
from quotas.gateway.wsgi import AUTHORIZE_PATH

EMPTY = b"{}"
HEADERS = [("Content-Type", "application/json"), ("Content-Length", str(len(EMPTY)))]
# An answer of the size of an admission's (~700 bytes), with as many headers.
STAND_IN = orjson.dumps({"allowed": True, "padding": "x" * 660})
STAND_IN_HEADERS = [("Content-Type", "application/json"),
                    ("Content-Length", str(len(STAND_IN))), ("X-Content-Type-Options", "nosniff")]
# Busy inside Redis for `loops` iterations of an empty Lua loop: as long as the caller made it.
_BUSY = "for _ = 1, tonumber(ARGV[1]) do end return 1"


def _redis_call(*command) -> None:
    """One command on the limiter's own per-thread connection, as authorize sends its script."""
    from quotas.limiter.connection import _hot_connection, limiter_client

    conn = _hot_connection(limiter_client().connection_pool)
    conn.send_command(*command, check_health=False)
    conn.read_response()


def stand_in_loops(client, *, microseconds: float) -> int:
    """How many iterations of _BUSY keep `client`'s Redis busy for `microseconds` (measured
    there, from its own command statistics)."""
    def usec() -> int:
        return client.info("commandstats").get("cmdstat_eval", {"usec": 0})["usec"]

    loops, calls = 20_000, 50
    client.eval(_BUSY, 0, loops)
    before = usec()
    for _ in range(calls):
        client.eval(_BUSY, 0, loops)
    per_loop = (usec() - before) / calls / loops
    return max(1, round(microseconds / per_loop))


_canned = threading.local()


def _script_run_or_canned(real):
    """authorize.lua's reply, asked of Redis once per thread and then replayed while
    /bench/no-redis is served: every other script, and every other request, is unchanged."""
    def script_run(name, *, keys, args, bulk=False):
        if name != "authorize" or not getattr(_canned, "on", False):
            return real(name, keys=keys, args=args, bulk=bulk)
        reply = getattr(_canned, "reply", None)
        if reply is None:
            reply = _canned.reply = real(name, keys=keys, args=args, bulk=bulk)
        return reply
    return script_run


quotas.limiter.engine.script_run = _script_run_or_canned(quotas.limiter.engine.script_run)


def application(environ, start_response):
    path = environ.get("PATH_INFO")
    if path == "/bench/empty":
        start_response("200 OK", HEADERS)
        return [EMPTY]
    if path == "/bench/ping":
        _redis_call("PING")
        start_response("200 OK", HEADERS)
        return [EMPTY]
    if path == "/bench/stand-in":
        # Authorize with none of its Python: a body of its size read and parsed, Redis busy
        # for as long as authorize.lua (the body's `stand_in_loops`), an answer of its size.
        _redis_call("EVAL", _BUSY, 0, orjson.loads(environ["wsgi.input"].read())["stand_in_loops"])
        start_response("200 OK", STAND_IN_HEADERS)
        return [STAND_IN]
    if path == "/bench/no-redis":
        # Authorize, all of it (fast path, input, token, routing, decision, answer), but the
        # script's reply is replayed instead of asked: the ceiling of a design that decides
        # without a Redis call per request (per-process leases), before its own bookkeeping.
        environ["PATH_INFO"], _canned.on = AUTHORIZE_PATH, True
        try:
            return sluice(environ, start_response)
        finally:
            _canned.on = False
    return sluice(environ, start_response)
