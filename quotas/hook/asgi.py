"""Authorize on the production server's event loop (config/asgi.py).

The ASGI bridge (sluice/asgi_bridge.py) hands each request to a thread that runs Django's WSGI
application, and a decision there waits for Redis in that thread: the thread hop costs about
what a whole empty request costs. Here POST /api/gateway/v1/authorize is decided on the loop
itself: the same steps as the WSGI fast path and the Django view (quotas/hook/hook.py), the
script awaited on the loop's pipelined Redis connection (quotas/limiter/aio.py), and only what
may block (a pool rebuilt from PostgreSQL, a fail-open decision, the gateway tokens read for
the first time, an unknown model or token) done in one of the bridge's threads. The leases'
heartbeat and release are answered the same way (one script call per pool). Everything else
(other paths, other methods, usage) goes to the bridge.

The answers are the WSGI fast path's, checks included: the Host against ALLOWED_HOSTS, the
body limit (DATA_UPLOAD_MAX_MEMORY_SIZE), `nosniff`.
"""

import asyncio
from concurrent.futures import Executor

from django.conf import settings

from quotas.hook.hook import authorize_steps
from quotas.hook.inputs import body_too_large
from quotas.hook.wsgi import AUTHORIZE_PATH, database_hygiene, hook_reply, host_refusal
from quotas.limiter.steps import steps_run_async
from sluice.asgi_bridge import BodyTooLarge, body_receive


def _headers(scope) -> tuple[str, str]:
    """(Host, Authorization), repeated headers joined with commas as WSGI servers do."""
    host = authorization = None
    for name, value in scope["headers"]:
        if name == b"host":
            text = value.decode("latin-1")
            host = text if host is None else f"{host},{text}"
        elif name == b"authorization":
            text = value.decode("latin-1")
            authorization = text if authorization is None else f"{authorization},{text}"
    if host is None:  # HTTP/1.0 without one: the server's name, as a WSGI server's SERVER_NAME
        host = str((scope.get("server") or ("",))[0])
    return host, authorization or ""


def _run(fn, kwargs: dict):
    """A step's blocking work, in a thread: then what the WSGI fast path does after a call."""
    try:
        return fn(**kwargs)
    finally:
        database_hygiene()


async def _send(send, status: int, body: dict) -> None:
    data, headers = hook_reply(body)
    await send({"type": "http.response.start", "status": status,
                "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]})
    await send({"type": "http.response.body", "body": data})


def hook_on_loop(app, *, executor: Executor, routes: dict | None = None):
    """`app` (the bridge), with POST authorize answered on the event loop, and `routes` (path
    -> steps: metering's leases); `executor` runs the steps that may block (the bridge's own
    threads)."""
    # Path -> the steps, and what their refusals carry besides the error (authorize's every
    # answer that admits nothing says `allowed: false`).
    on_loop = {AUTHORIZE_PATH: (authorize_steps, {"allowed": False}),
               **{route: (steps, {}) for route, steps in (routes or {}).items()}}

    def in_thread(fn, kwargs: dict):
        return asyncio.get_running_loop().run_in_executor(executor, _run, fn, kwargs)

    async def application(scope, receive, send):
        hook = on_loop.get(scope["path"]) if scope["type"] == "http" else None
        if hook is None or scope["method"] != "POST":
            return await app(scope, receive, send)
        steps, refused = hook
        host, authorization = _headers(scope)
        refusal = host_refusal(host)
        if refusal is not None:
            status, error = refusal
            return await _send(send, status, {**refused, **error})
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        try:
            body = await body_receive(scope, receive, limit)
        except BodyTooLarge:
            body = None
            too_large = body_too_large(limit)
        else:
            if body is None:  # the client went away
                return None
            too_large = None

        def read_body() -> bytes:
            if too_large is not None:
                raise too_large
            return body

        status, answer = await steps_run_async(
            steps(method="POST", authorization=authorization, read_body=read_body),
            in_thread=in_thread)
        return await _send(send, status, answer)

    return application
