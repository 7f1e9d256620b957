"""The few ASGI pieces the gateway needs, written against the ASGI spec directly.

Two hot routes do not need a framework: a dict lookup dispatches, a request is its scope's
headers and a bounded body read, an answer is one `http.response.start` and one body message.
Starlette's routing, middleware stack and Request/Response objects cost more CPU per request
than this whole module (bench/gateway_asgi.py measures both).
"""

import asyncio
from collections.abc import Awaitable, Callable

import orjson

from gateway.server import DISCONNECT_WATCH

JSON = b"application/json"


class BodyTooLarge(Exception):
    """The body is (or declares itself) larger than the gateway accepts."""


class ClientGone(Exception):
    """The client closed the connection before its body arrived whole."""


class Request:
    """What a handler reads of one HTTP request: method, path, headers (lower-case names,
    latin-1 values, the last one of a repeated name), and a body read on demand."""

    __slots__ = ("scope", "receive", "headers")

    def __init__(self, scope: dict, receive: Callable[[], Awaitable[dict]]):
        self.scope, self.receive = scope, receive
        self.headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}

    @property
    def method(self) -> str:
        return self.scope["method"]

    @property
    def path(self) -> str:
        return self.scope["path"]

    def declared_length(self) -> int | None:
        """Content-Length as the client declared it; None without one (chunked)."""
        raw = self.headers.get("content-length")
        if raw is None:
            return None
        try:
            value = int(raw)
        except ValueError:
            raise BodyTooLarge from None  # unreadable: refuse, never guess
        if value < 0:
            raise BodyTooLarge
        return value

    async def body(self, *, limit: int) -> bytes:
        """The whole body, refused with BodyTooLarge as soon as it declares or reaches more
        than `limit` bytes (what was read so far is dropped, the rest never read)."""
        declared = self.declared_length()
        if declared is not None and declared > limit:
            raise BodyTooLarge
        chunks, size = [], 0
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                raise ClientGone
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise BodyTooLarge
            chunks.append(chunk)
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)


class Answer:
    """A whole response: status, body, headers (str names and values, as the client sees
    them). Callable as an ASGI app, like the streaming relay."""

    __slots__ = ("status", "body", "headers", "media_type")

    def __init__(self, body: bytes, *, status: int = 200, headers: dict | None = None,
                 media_type: bytes = JSON):
        self.status, self.body, self.headers, self.media_type = status, body, headers, media_type

    async def __call__(self, scope, receive, send) -> None:
        raw = [(b"content-type", self.media_type),
               (b"content-length", str(len(self.body)).encode())]
        if self.headers:
            raw += [(k.encode("latin-1"), str(v).encode("latin-1"))
                    for k, v in self.headers.items()]
        await send({"type": "http.response.start", "status": self.status, "headers": raw})
        await send({"type": "http.response.body", "body": self.body})


def json_answer(data, *, status: int = 200, headers: dict | None = None) -> Answer:
    return Answer(orjson.dumps(data), status=status, headers=headers)


class ClientWatched:
    """While in it: if the client disconnects before its answer is complete, cancel this task
    (and with it what it awaits: the upstream's answer, a stream's next read); `gone` then
    says why it was cancelled. Served by the
    gateway's own protocol, the server calls back (no task); under another ASGI server a task
    waits for `http.disconnect`."""

    __slots__ = ("scope", "receive", "task", "watcher", "unwatch", "gone")

    def __init__(self, scope: dict, receive):
        self.scope, self.receive, self.gone = scope, receive, False
        self.watcher = self.unwatch = None

    async def __aenter__(self) -> "ClientWatched":
        self.task = asyncio.current_task()
        watch = self.scope.get("extensions", {}).get(DISCONNECT_WATCH)
        if watch is not None:
            self.unwatch = watch(self._gone)
        else:
            self.watcher = asyncio.create_task(self._watch())
        return self

    async def __aexit__(self, *exc) -> None:
        if self.unwatch is not None:
            self.unwatch()
        else:
            self.watcher.cancel()
        if self.gone:
            self.task.uncancel()

    async def _watch(self) -> None:
        while (await self.receive())["type"] != "http.disconnect":
            pass
        self._gone()

    def _gone(self) -> None:
        self.gone = True
        self.task.cancel()
