"""The gateway hook (authorize and usage) as ASGI, in front of Django's ASGI application.

Why ASGI: a request body is read on the event loop, chunk by chunk as it arrives, and only a
complete request is handed to a thread. A client that sends its headers and then trickles or
stalls its body costs a coroutine, never one of the threads that decide. (Under a threaded
WSGI server the thread that reads the body is the thread that would have served the next
authorize: 40 such clients held every thread of the old gunicorn layout.)

The hook's logic is hook.py's, run in this process's pool of settings.HOOK_THREADS threads
(SLUICE_HOOK_THREADS; it blocks
on Redis and, for usage, PostgreSQL). What Django's middleware would do for the hook is kept,
as on the WSGI fast path: the Host check, the body size limit, `nosniff`, and the request
signals that keep database connections healthy. Every other request goes to Django's ASGI
handler, which also reads the whole body before it runs a view.
"""

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus

from django.conf import settings
from django.core import signals

from quotas.gateway.hook import authorize_handle, hook_call, usage_handle
from quotas.gateway.metrics import AUTHORIZE_SECONDS, USAGE_SECONDS
from quotas.gateway.wsgi import hook_refusal
from sluice.error_format import error_body

HOOKS = {"/api/gateway/v1/authorize": (authorize_handle, AUTHORIZE_SECONDS),
         "/api/gateway/v1/usage": (usage_handle, USAGE_SECONDS)}


class _TooLarge(Exception):
    pass


async def _body(receive, limit: int) -> bytes | None:
    """The whole body, however it is sent (Content-Length or chunked); None if the client
    went away first."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _TooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _reply(send, status: int, body: dict) -> None:
    data = json.dumps(body, separators=(",", ":")).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
        (b"x-content-type-options", b"nosniff")]})
    await send({"type": "http.response.body", "body": data})


def _call(handler, histogram, method: str, authorization: str, body: bytes):
    # Django's request signals: their receivers close stale database connections.
    signals.request_started.send(sender=gateway_asgi)
    try:
        return hook_call(handler, histogram, method=method, authorization=authorization,
                         body=body)
    finally:
        signals.request_finished.send(sender=gateway_asgi)


def gateway_asgi(django_app):
    executor = ThreadPoolExecutor(max_workers=settings.HOOK_THREADS, thread_name_prefix="hook")

    async def application(scope, receive, send):
        hook = HOOKS.get(scope.get("path", "")) if scope["type"] == "http" else None
        if hook is None:
            return await django_app(scope, receive, send)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        refusal = hook_refusal(host=headers.get("host", ""),
                               content_length=headers.get("content-length", "0"))
        if refusal is not None:
            return await _reply(send, *refusal)
        try:
            body = await _body(receive, settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
        except _TooLarge:
            return await _reply(send, HTTPStatus.BAD_REQUEST, error_body(
                code="malformed_request", message="Request body too large."))
        if body is None:
            return None
        status, answer = await asyncio.get_running_loop().run_in_executor(
            executor, _call, *hook, scope["method"], headers.get("authorization", ""), body)
        return await _reply(send, status, answer)

    return application
