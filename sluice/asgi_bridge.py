"""A WSGI application served by an ASGI server, each request's whole body read first.

Why: under a threaded WSGI server, the thread that reads a request's body is the thread that
serves it, so a client that sends its headers and then trickles (or stalls) its body holds a
thread for as long as it likes; 40 such clients hold every thread of a gunicorn gthread layout
and authorize stalls (bench/slow_clients.py). Here the body is collected on the event loop,
chunk by chunk as it arrives (a slow client costs a coroutine), and only a complete request is
handed to one of `threads` threads, which run the WSGI application exactly as a threaded WSGI
server would (Django's: config/wsgi.py). Chunked request bodies
arrive whole, with their Content-Length. Responses are sent as the application yields them.
"""

import asyncio
import io
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

_TOO_LARGE = b'{"error":{"code":"request_too_large","message":"Request body too large."}}'
# In the thread that runs the application, the response is read up to this much: most answers
# are whole by then and cost one trip to the thread, a big or streaming one goes on in chunks.
FIRST_BYTES = 64 * 1024


class BodyTooLarge(Exception):
    pass


def content_length(headers) -> int | None:
    """The Content-Length an ASGI scope's `headers` declare, or None: none, or a body sent with
    Transfer-Encoding, whose chunks say its length whatever Content-Length says (RFC 9112 6.3;
    uvicorn refuses such a request, a server that passes it on must not have us trust it)."""
    length = None
    for name, value in headers:
        if name == b"content-length":
            length = int(value) if value.isdigit() else None
        elif name == b"transfer-encoding":
            return None
    return length


async def body_receive(scope, receive, limit: int) -> bytes | None:
    """The whole body; None if the client went away first. BodyTooLarge past `limit` bytes.

    The Content-Length the request declared (content_length) ends the reading as soon as that
    many bytes are in, whatever the last chunk says of more_body. uvicorn marks the chunk that
    completes a body itself (more_body false), but ASGI lets a server mark the end only on one
    more receive() (granian does: the last chunk says more_body, the next is an empty end),
    which would cost a second receive, and a wait, for every body. A chunked body has no length
    and is read to the end the server marks."""
    length = content_length(scope["headers"])
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
        if size == length or not message.get("more_body", False):
            return b"".join(chunks)


def _environ(scope, body: bytes) -> dict:
    server = scope.get("server") or ("127.0.0.1", 80)
    environ = {
        "REQUEST_METHOD": scope["method"],
        "SCRIPT_NAME": scope.get("root_path", "").encode().decode("latin-1"),
        "PATH_INFO": scope["path"].encode().decode("latin-1"),
        "QUERY_STRING": scope.get("query_string", b"").decode("latin-1"),
        "SERVER_NAME": str(server[0]), "SERVER_PORT": str(server[1] or 80),
        "REMOTE_ADDR": (scope.get("client") or ("", 0))[0],
        "SERVER_PROTOCOL": f"HTTP/{scope.get('http_version', '1.1')}",
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.version": (1, 0), "wsgi.url_scheme": scope.get("scheme", "http"),
        "wsgi.input": io.BytesIO(body), "wsgi.errors": sys.stderr,
        "wsgi.multithread": True, "wsgi.multiprocess": True, "wsgi.run_once": False,
    }
    for raw_name, raw_value in scope.get("headers", []):
        name, value = raw_name.decode("latin-1").upper().replace("-", "_"), \
            raw_value.decode("latin-1")
        if name == "CONTENT_LENGTH":
            continue  # the body's own length, above: chunked bodies have none
        key = name if name == "CONTENT_TYPE" else f"HTTP_{name}"
        environ[key] = f"{environ[key]},{value}" if key in environ else value
    return environ


def _close(result) -> None:
    close = getattr(result, "close", None)
    if close is not None:
        close()


def _start(app, environ) -> tuple[int, list, list, object, object]:
    """Run the application and read its response up to FIRST_BYTES: (status, headers, chunks
    read, the rest or None when done, the result to close or None when closed)."""
    started, written = {}, []

    def start_response(status, headers, exc_info=None):
        started["status"], started["headers"] = int(status.split(" ", 1)[0]), headers
        return written.append

    result = app(environ, start_response)
    rest, size = iter(result), 0
    for chunk in rest:
        written.append(chunk)
        size += len(chunk)
        if size >= FIRST_BYTES:
            return started["status"], started["headers"], written, rest, result
    _close(result)
    return started["status"], started["headers"], written, None, None


async def _send_json(send, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def wsgi_executor(threads: int) -> ThreadPoolExecutor:
    """The threads that run the application (the server's other work in threads may share
    them: config/asgi.py)."""
    return ThreadPoolExecutor(max_workers=threads, thread_name_prefix="wsgi")


def wsgi_app_as_asgi(app, *, executor: ThreadPoolExecutor, max_body: int,
                     on_startup: Callable[[], None] | None = None):
    """`app` as an ASGI application; `on_startup` runs when the server starts the process
    (ASGI's lifespan startup), before its first request."""

    async def application(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                message = (await receive())["type"]
                if message == "lifespan.startup":
                    if on_startup is not None:
                        on_startup()
                    await send({"type": "lifespan.startup.complete"})
                elif message == "lifespan.shutdown":
                    return await send({"type": "lifespan.shutdown.complete"})
        if scope["type"] != "http":
            return None
        try:
            body = await body_receive(scope, receive, max_body)
        except BodyTooLarge:  # refused before any thread was involved
            return await _send_json(send, 413, _TOO_LARGE)
        if body is None:
            return None
        loop = asyncio.get_running_loop()
        status, headers, chunks, rest, result = await loop.run_in_executor(
            executor, _start, app, _environ(scope, body))
        try:
            await send({"type": "http.response.start", "status": status, "headers": [
                (k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]})
            await send({"type": "http.response.body", "body": b"".join(chunks),
                        "more_body": rest is not None})
            while rest is not None:
                chunk = await loop.run_in_executor(executor, next, rest, None)
                await send({"type": "http.response.body", "body": chunk or b"",
                            "more_body": chunk is not None})
                if chunk is None:
                    rest = None
        finally:
            if result is not None:
                await loop.run_in_executor(executor, _close, result)
        return None

    return application
