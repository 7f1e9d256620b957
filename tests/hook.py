"""Calling the served application (config/asgi.py) in-process, as the production server calls
it: on an event loop of its own thread (one for the whole run, as a worker's), the blocking
work in the process's threads (quotas/hook/asgi.py's hook_threads), which have their own
database connections. Tests that use it commit their rows:

    pytestmark = pytest.mark.django_db(transaction=True)

    hook = HookClient(token)  # Authorization: Bearer <token> on every call
    r = hook.post("/api/gateway/v1/authorize", {"request_id": ...})
    r.status_code, r.json(), r.headers["retry-after"]

Callable from any thread (tests racing decisions); `many` puts calls in flight together on
the loop.
"""

import asyncio
import threading
from contextlib import contextmanager

import httpx
import orjson
from django.db import connections

from tests.aio import shared_loop

AUTHORIZE = "/api/gateway/v1/authorize"
USAGE = "/api/gateway/v1/usage"


class Answer:
    """What the application sent: status_code, headers (any case), content, json()."""

    def __init__(self, status: int, headers: list, content: bytes):
        self.status_code = status
        self.headers = httpx.Headers([(k.decode("latin-1"), v.decode("latin-1"))
                                      for k, v in headers])
        self.content = content

    def json(self):
        return orjson.loads(self.content)

    def __getitem__(self, name: str) -> str:
        return self.headers[name]


class _Served:
    def __init__(self) -> None:
        from config.asgi import application

        self.app = application
        self.loop = shared_loop()


_served: _Served | None = None
_lock = threading.Lock()


def served() -> _Served:
    global _served
    with _lock:
        if _served is None:
            _served = _Served()
        return _served


def _body(data, content) -> bytes:
    if content is not None:
        return content.encode() if isinstance(content, str) else content
    if data is None:
        return b""
    return data if isinstance(data, bytes) else orjson.dumps(data)


async def call(method: str, path: str, body: bytes = b"", headers: dict | None = None,
               chunks: list[bytes] | None = None) -> Answer:
    """One request to the application, on the running loop (the served one)."""
    raw = [(k.lower().encode("latin-1"), v.encode("latin-1"))
           for k, v in {"host": "testserver", **(headers or {})}.items()]
    if chunks is None:
        raw.append((b"content-length", str(len(body)).encode()))
        chunks = [body]
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": method, "scheme": "http", "path": path, "raw_path": path.encode(),
             "query_string": b"", "root_path": "", "headers": raw,
             "client": ("127.0.0.1", 50000), "server": ("testserver", 80)}
    pending = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1}
               for i, c in enumerate(chunks)]
    started, parts = {}, []

    async def receive():
        if pending:
            return pending.pop(0)
        await asyncio.Event().wait()  # nothing more: the client waits for the answer

    async def send(message):
        if message["type"] == "http.response.start":
            started.update(message)
        else:
            parts.append(message.get("body", b""))

    await served().app(scope, receive, send)
    return Answer(started["status"], started.get("headers", []), b"".join(parts))


def _meta_headers(extra: dict) -> dict:
    """Django test-client style HTTP_* keywords as headers (HTTP_X_FORWARDED -> x-forwarded).
    """
    return {k[5:].lower().replace("_", "-"): v for k, v in extra.items()
            if k.startswith("HTTP_")}


class HookClient:
    """A gateway calling the served application with a gateway token (or none). Takes the
    Django test client's HTTP_* keywords too (HTTP_AUTHORIZATION=..., HTTP_HOST=...)."""

    def __init__(self, token: str | None = None, *, headers: dict | None = None, **extra):
        self.headers = {**({"authorization": f"Bearer {token}"} if token else {}),
                        **_meta_headers(extra), **(headers or {})}

    def request(self, method: str, path: str, data=None, *, content=None, json=None,
                headers: dict | None = None, chunks: list[bytes] | None = None,
                **extra) -> Answer:
        """`data` (or `json`): a JSON-ready value, or bytes sent as they are (`content=` too);
        `chunks`: the body in these pieces, without a Content-Length (chunked)."""
        headers = {**self.headers, **_meta_headers(extra), **(headers or {})}
        body = _body(json if data is None else data, content)
        return served().loop.run(call(method, path, body, headers, chunks))

    def post(self, path: str, data=None, content_type: str | None = None, **kwargs) -> Answer:
        """`content_type`: the Django client's keyword, ignored (the hook reads JSON)."""
        return self.request("POST", path, data, **kwargs)

    def put(self, path: str, **kwargs) -> Answer:
        return self.request("PUT", path, **kwargs)

    def get(self, path: str, **kwargs) -> Answer:
        return self.request("GET", path, **kwargs)

    def authorize(self, body, **kwargs) -> Answer:
        return self.post(AUTHORIZE, body, **kwargs)

    def usage(self, body, **kwargs) -> Answer:
        return self.post(USAGE, body, **kwargs)

    def many(self, path: str, bodies: list) -> list[Answer]:
        """All at once on the loop: every call in flight together."""
        async def race():
            return await asyncio.gather(*(call("POST", path, _body(b, None), self.headers)
                                          for b in bodies))
        return served().loop.run(race())


def served_connections_close() -> None:
    """Close the database connections the process's threads opened (after each test: else
    the test database could not be dropped at the end of the run). One task per thread, held
    together by a barrier."""
    from tests import aio

    if aio._shared is None:
        return
    from quotas.hook.asgi import hook_threads

    threads = hook_threads()
    count = len(threads._threads)
    if not count:
        return
    barrier = threading.Barrier(count)

    def close_here():
        connections.close_all()
        barrier.wait(timeout=10)
    try:
        futures = [threads.submit(close_here) for _ in range(count)]
    except RuntimeError:  # the threads were shut down already: their connections went with them
        return
    for future in futures:
        future.result(timeout=30)


async def _over_http(scope, receive, send):
    """The served application for a real HTTP server in this process (uvicorn in a thread):
    its loop's default executor made the process's threads at start-up, as a worker's."""
    if scope["type"] == "lifespan":
        from quotas.hook.asgi import loop_threads_use

        while True:
            message = (await receive())["type"]
            if message == "lifespan.startup":
                loop_threads_use()
                await send({"type": "lifespan.startup.complete"})
            elif message == "lifespan.shutdown":
                return await send({"type": "lifespan.shutdown.complete"})
    return await served().app(scope, receive, send)


def served_over_http():
    """A server (gateway/serving.py's ServerThread: uvicorn in a thread) answering HTTP with
    the served application; `.url`, `.stop()`."""
    from gateway.serving import ServerThread

    served()  # the application built now (Django, every URLconf), not by the first request
    return ServerThread(_over_http).start()


@contextmanager
def hook_client(name: str):
    """A client of the served hook with a gateway token of its own (`name`), the engine's
    connections and the hook's caches fresh before and after."""
    from quotas.hook.fail_open import fail_open_reset
    from quotas.hook.gateway_tokens import gateway_token_cache_clear, gateway_token_create
    from quotas.limiter.connection import limiter_reset

    limiter_reset()
    gateway_token_cache_clear()
    fail_open_reset()
    _, token = gateway_token_create(name=name, actor="test")
    yield HookClient(token)
    gateway_token_cache_clear()
    limiter_reset()
