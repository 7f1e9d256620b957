"""The production ASGI application (config/asgi.py: the hook on the event loop, everything
else through the bridge) with the benchmark endpoints, at the two layers a request can be
served at. Benchmarks only.

At the bare WSGI layer (bench/wsgi_ceiling.py, behind the bridge's threads, where every Django
request is served): /bench/empty, the yardstick of authorize's ratio.

At the event loop, where authorize is decided (quotas/hook/asgi.py):
- /bench/loop-empty: an empty JSON answer at once: the ceiling of this server and load
  generator for a request served on the loop (the stricter yardstick).
- /bench/loop-stand-in: authorize with none of its Python: a body of its size read and parsed,
  Redis kept busy (an empty Lua loop, `stand_in_loops` in the body) as long as authorize.lua
  takes, over the loop's own connection, and an answer of its size.
- /bench/loop-no-redis: authorize whole, with authorize.lua's reply asked of Redis once and then
  replayed: what its Python costs on the loop without the Redis call.
"""

import asyncio
import contextvars

import hiredis
import orjson
from django.conf import settings

from bench.wsgi_ceiling import application as wsgi_application
from config.asgi import HOOK_ROUTES, worker_ready
from quotas.hook.asgi import hook_application, hook_threads
from quotas.limiter import aio
from quotas.limiter.connection import connection_pool_for, limiter_client
from sluice.asgi_bridge import body_receive, wsgi_app_as_asgi

AUTHORIZE_PATH = "/api/gateway/v1/authorize"

# An answer of the size of an admission's (~700 bytes), with as many headers.
STAND_IN = orjson.dumps({"allowed": True, "padding": "x" * 660})
STAND_IN_HEADERS = [(b"content-type", b"application/json"),
                    (b"content-length", str(len(STAND_IN)).encode()),
                    (b"x-content-type-options", b"nosniff")]
EMPTY_HEADERS = [(b"content-type", b"application/json"), (b"content-length", b"2")]
# Busy inside Redis for `loops` iterations of an empty Lua loop: as long as the caller made it.
BUSY = "for _ = 1, tonumber(ARGV[1]) do end return 1"


def stand_in_loops(client, *, microseconds: float) -> int:
    """How many iterations of BUSY keep `client`'s Redis busy for `microseconds` (measured
    there, from its own command statistics)."""
    def usec() -> int:
        return client.info("commandstats").get("cmdstat_eval", {"usec": 0})["usec"]

    loops, calls = 20_000, 50
    client.eval(BUSY, 0, loops)
    before = usec()
    for _ in range(calls):
        client.eval(BUSY, 0, loops)
    per_loop = (usec() - before) / calls / loops
    return max(1, round(microseconds / per_loop))


async def _redis_busy(loops: int) -> None:
    """One EVAL of BUSY over the loop's own pipelined connection, as authorize sends its
    script (quotas/limiter/aio.py)."""
    loop = asyncio.get_running_loop()
    pool = connection_pool_for(limiter_client(), "{bench}")
    link = aio._links.get((loop, pool))
    if type(link) is not aio._Link or link.lost:
        link = await aio._link_connect(loop, pool)
    await link.call(hiredis.pack_command(("EVAL", BUSY, 0, loops)), 5.0)


_replaying = contextvars.ContextVar("replaying", default=False)
_replies: dict[str, object] = {}


def _script_run_or_replayed(real):
    """authorize.lua's reply, asked of Redis once per process and then replayed while
    /bench/loop-no-redis is served: every other script, and every other request, unchanged."""
    async def script_run_async(name, *, keys, args):
        if name != "authorize" or not _replaying.get():
            return await real(name, keys=keys, args=args)
        if name not in _replies:
            _replies[name] = await real(name, keys=keys, args=args)
        return _replies[name]
    return script_run_async


aio.script_run_async = _script_run_or_replayed(aio.script_run_async)
# config/asgi.py's application, its Django behind the bridge being bench/wsgi_ceiling.py's.
production = hook_application(HOOK_ROUTES, wsgi_app_as_asgi(
    wsgi_application, executor=hook_threads(),
    max_body=4 * settings.DATA_UPLOAD_MAX_MEMORY_SIZE, on_startup=worker_ready))


async def application(scope, receive, send):
    path = scope.get("path")
    if path == "/bench/loop-empty":
        await send({"type": "http.response.start", "status": 200, "headers": EMPTY_HEADERS})
        return await send({"type": "http.response.body", "body": b"{}"})
    if path == "/bench/loop-stand-in":
        body = await body_receive(scope, receive, 1 << 20)
        if body is None:  # the client went away
            return None
        await _redis_busy(orjson.loads(body)["stand_in_loops"])
        await send({"type": "http.response.start", "status": 200, "headers": STAND_IN_HEADERS})
        return await send({"type": "http.response.body", "body": STAND_IN})
    if path == "/bench/loop-no-redis":
        _replaying.set(True)  # this request's task only
        return await production({**scope, "path": AUTHORIZE_PATH}, receive, send)
    return await production(scope, receive, send)
