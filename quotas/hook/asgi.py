"""The hook's HTTP face: every /api/gateway/v1/ path the server's route table names
(config/asgi.py), answered on the event loop of the production server, before Django.

A route is a path and an async handler, `handler(authorization, body) -> (status, body)`
(quotas/hook/hook.py). Here, for every route: POST only (405 names it), the Host against
ALLOWED_HOSTS, the body whole and within DATA_UPLOAD_MAX_MEMORY_SIZE (a larger declared
Content-Length is refused at once, before a byte of the body is awaited), and the answer as
JSON with `nosniff`. Django's middleware (sessions, auth, CSRF, messages) is none of the hook's
business and is skipped. What must block (PostgreSQL, the synchronous Redis client) runs in the
process's threads (`hook_threads`), which tidy their database connections after each call as
Django's request signals would.
"""

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

import orjson
from django.conf import settings
from django.db import connections
from django.http.request import split_domain_port, validate_host

from sluice.asgi_bridge import BodyTooLarge, body_receive, content_length
from sluice.errors import error_body

Answer = tuple[int, dict]
Handler = Callable[[str, bytes], Awaitable[Answer]]


def hook_reply(body: dict) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """A hook answer's bytes and headers."""
    data = orjson.dumps(body)
    return data, [(b"content-type", b"application/json"),
                  (b"content-length", str(len(data)).encode()),
                  (b"x-content-type-options", b"nosniff")]


def host_refusal(host: str) -> Answer | None:
    """The refusal of a request whose Host is not in ALLOWED_HOSTS, or None. Remembered per
    Host value (a gateway sends the same one every time; the check costs ~9 µs)."""
    refusal = _host_refusals.get(host, _UNKNOWN)
    if refusal is _UNKNOWN:
        domain, _ = split_domain_port(host)
        refusal = None
        if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
            refusal = 400, error_body(code="bad_host", message=f"Host {host!r} not allowed.")
        if len(_host_refusals) >= HOSTS_REMEMBERED:  # callers choose it: bound the memory
            _host_refusals.clear()
        _host_refusals[host] = refusal
    return refusal


HOSTS_REMEMBERED = 1_000
_UNKNOWN = object()
_host_refusals: dict[str, Answer | None] = {}


def host_refusals_forget() -> None:
    """ALLOWED_HOSTS changed (tests' settings fixture): check every Host again."""
    _host_refusals.clear()


def _headers(scope) -> tuple[str, str]:
    """(Host, Authorization), repeated headers joined with commas."""
    host = authorization = None
    for name, value in scope["headers"]:
        if name == b"host":
            text = value.decode("latin-1")
            host = text if host is None else f"{host},{text}"
        elif name == b"authorization":
            text = value.decode("latin-1")
            authorization = text if authorization is None else f"{authorization},{text}"
    if host is None:  # HTTP/1.0 without one: the server's own name
        host = str((scope.get("server") or ("",))[0])
    return host, authorization or ""


def _too_large(limit: int) -> dict:
    return error_body(code="request_too_large", message=f"The body must be at most {limit} bytes.")


async def _send(send, status: int, body: dict, extra: tuple = ()) -> None:
    data, headers = hook_reply(body)
    await send({"type": "http.response.start", "status": status, "headers": [*headers, *extra]})
    await send({"type": "http.response.body", "body": data})


_CLOSE = ((b"connection", b"close"),)  # the rest of a refused body is not read


async def _answer(handler: Handler, scope, receive) -> tuple[int, dict | None, tuple]:
    """(status, body, extra headers) of one hook request; body None: the client went away.
    The refusals made here carry the handler's `refused` fields (authorize's
    `{"allowed": false}`)."""
    refused = getattr(handler, "refused", {})
    if scope["method"] != "POST":
        return 405, {**refused, **error_body(code="method_not_allowed", message="Use POST.")}, \
            ((b"allow", b"POST"),)
    host, authorization = _headers(scope)
    refusal = host_refusal(host)
    if refusal is not None:
        return refusal[0], {**refused, **refusal[1]}, ()
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    declared = content_length(scope["headers"])
    if declared is not None and declared > limit:  # refused before the body is awaited
        return 413, {**refused, **_too_large(limit)}, _CLOSE
    try:
        body = await body_receive(scope, receive, limit)
    except BodyTooLarge:
        return 413, {**refused, **_too_large(limit)}, _CLOSE
    if body is None:
        return 0, None, ()
    status, answer = await handler(authorization, body)
    return status, answer, ()


def hook_application(routes: dict[str, Handler], other):
    """An ASGI application answering `routes` (path -> handler) itself, and every other
    request with `other` (Django, through sluice/asgi_bridge.py)."""
    async def application(scope, receive, send):
        handler = routes.get(scope["path"]) if scope["type"] == "http" else None
        if handler is None:
            return await other(scope, receive, send)
        status, body, extra = await _answer(handler, scope, receive)
        if body is not None:
            await _send(send, status, body, extra)

    return application


class _Threads(ThreadPoolExecutor):
    """The process's threads for work that blocks: each call followed by what Django's request
    signals do for the database (close a connection that is broken or past CONN_MAX_AGE)."""

    def submit(self, fn, /, *args, **kwargs):
        return super().submit(_tidied, fn, args, kwargs)


def _tidied(fn, args, kwargs):
    try:
        return fn(*args, **kwargs)
    finally:
        for conn in connections.all(initialized_only=True):
            if not conn.in_atomic_block:
                conn.close_if_unusable_or_obsolete()


_threads: _Threads | None = None


def hook_threads() -> ThreadPoolExecutor:
    """The process's threads (settings.WEB_THREADS): Django's requests (the bridge) and the
    hook's blocking work share them."""
    global _threads
    if _threads is None:
        _threads = _Threads(max_workers=settings.WEB_THREADS, thread_name_prefix="sluice")
    return _threads


def loop_threads_use() -> None:
    """Make hook_threads the running loop's default executor (quotas/limiter/aio.py's
    in_thread and background use it)."""
    asyncio.get_running_loop().set_default_executor(hook_threads())
