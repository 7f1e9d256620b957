"""Relaying an upstream's SSE stream to the client while watching both ends.

The relay is a raw ASGI response so that it sees the client leave at once: the server's
disconnect callback (gateway/server.py; under another server, a task waiting on `receive()`
for `http.disconnect`: gateway/asgi.py, ClientWatched) cancels the pump, which closes the
upstream connection (the upstream stops generating) and reports the request `cancelled` with
what was sent.

Whatever one read from the upstream brings (its complete events) goes to the client in one
write, the bytes as they came, and no chunk is decoded (gateway/sse.py meters the bytes).
Writes are coalesced on a tick (GATEWAY_STREAM_COALESCE_MS, 10 ms): the write that carries the
first token goes at once; after each write the upstream connection is held (not read) until
the next tick, so whatever the upstream wrote meanwhile comes in one read and leaves in one
write. A token waits at most one tick; an upstream that writes a token at a time costs a read,
a wake-up and a write per tick instead of per token. An upstream that already batches (one
write came in a held half tick or more) is not held: holding would only delay it; it is tried
again every RECHECK_WRITES writes. The tick is one clock for every stream of the process (one
timer; the streams held together are read and written in the same turn of the event loop,
one poll of the sockets for all of them). After `[DONE]` the upstream's answer is read to its
end, so its connection goes back to the pool instead of being closed.
"""

import asyncio

import anyio
from sluice_client.http1 import HttpError, Response

from gateway.asgi import ClientWatched
from gateway.attempt import Attempt
from gateway.errors import sse_error
from gateway.sse import EVENT_END, StreamMeter

# One event larger than this (a Responses `response.completed` carries the whole answer) is
# a broken upstream, not a long answer.
EVENT_MAX_BYTES = 8 * 2 ** 20
# After [DONE], how long the rest of the upstream's answer (its chunked terminator) may take
# before the connection is closed rather than reused.
DRAIN_SECONDS = 1.0
# Writes made without holding once holding was seen to gather one upstream write a tick (an
# upstream that batches by itself), before trying again.
RECHECK_WRITES = 100
HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"),
           (b"cache-control", b"no-cache")]


class Ticker:
    """Resumes, on each tick of one clock (multiples of `interval` of the loop's time), the
    upstreams held since the last one: one timer for every stream of the process."""

    def __init__(self, interval: float):
        self.interval = interval
        self.ticked_at = 0.0  # the loop's time of the last tick
        self._held: list[Response] = []
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def hold(self, upstream: Response) -> float:
        """Hold `upstream` until the next tick; returns the loop's time now."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        now = self._loop.time()
        upstream.hold()
        self._held.append(upstream)
        if self._timer is None:
            self._timer = self._loop.call_at(now - now % self.interval + self.interval,
                                             self._tick)
        return now

    def _tick(self) -> None:
        self._timer = None
        self.ticked_at = self._loop.time()
        held, self._held = self._held, []
        for upstream in held:
            upstream.unhold()  # a no-op for one released or closed meanwhile


class StreamRelay:
    def __init__(self, *, gateway, attempt: Attempt, upstream: Response,
                 client_wants_usage: bool, headers: dict):
        self.gateway, self.attempt, self.upstream = gateway, attempt, upstream
        self.headers = headers
        # None from a Sluice that does not name tiers: the upstream's chunks pass unchanged.
        self.meter = StreamMeter(operation=attempt.operation,
                                 service_tier=attempt.grant.service_tier if attempt.grant
                                 else None, keep_usage=client_wants_usage)
        self.status = "cancelled"   # until the pump says otherwise
        self.outcome = "cancelled"

    async def __call__(self, scope, receive, send) -> None:
        try:
            async with ClientWatched(scope, receive) as watch:
                try:
                    await send({"type": "http.response.start", "status": 200, "headers": [
                        *HEADERS,
                        *((k.encode(), str(v).encode()) for k, v in self.headers.items())]})
                    await self._pump(send)
                except asyncio.CancelledError:
                    if not watch.gone:
                        raise
                    # The client left: the pump stopped where it was (status `cancelled`).
                except OSError:  # the client went away while we were writing to it
                    pass
        finally:
            with anyio.CancelScope(shield=True):
                self._metered()
                self.gateway.attempt_finish(self.attempt, status=self.status,
                                            outcome=self.outcome)
                if self.status == "completed" and await self._drained():
                    self.upstream.release()  # read to its end: back to the pool
                else:
                    self.upstream.close()  # the upstream sees the connection close and stops

    async def _pump(self, send) -> None:
        upstream, meter, attempt = self.upstream, self.meter, self.attempt
        ticker = self.gateway.ticker  # None: coalescing off
        held_at = None  # the loop's time the upstream was held, if the read in hand followed
        skip = 0      # writes to make before holding again
        pending = b""
        try:
            while chunk := await upstream.readany():
                pieces = upstream.pieces
                pending += chunk
                if b"\r" in pending:  # servers may end SSE lines with CRLF
                    pending = pending.replace(b"\r\n", b"\n")
                cut = pending.rfind(EVENT_END)
                if cut < 0:
                    if len(pending) > EVENT_MAX_BYTES:
                        return await self._fail(send, "upstream_error",
                                                "The upstream sent an event too large.")
                    continue
                block, pending = pending[:cut + 2], pending[cut + 2:]
                deltas = meter.deltas
                out = meter.feed(block)
                if meter.deltas > deltas:
                    attempt.first_token()
                if meter.done:
                    return await self._complete(send, out)
                if out:
                    self.gateway.stream_sending(attempt, meter.deltas)
                    await send({"type": "http.response.body", "body": out, "more_body": True})
                    attempt.delivered_tokens = meter.deltas  # the request's progress
                    if ticker and meter.deltas:  # never before the first token is out
                        if held_at is not None and pieces == 1 and (
                                ticker.ticked_at - held_at >= ticker.interval / 2):
                            # One upstream write in half a tick or more: it batches as the
                            # tick would, and holding would only delay it. Try again later.
                            skip = RECHECK_WRITES
                        held_at = None
                        if skip:
                            skip -= 1
                        else:
                            held_at = ticker.hold(upstream)
        except TimeoutError:
            return await self._fail(send, "upstream_timeout",
                                    "The upstream stopped sending tokens.")
        except HttpError:
            return await self._fail(send, "upstream_error", "The upstream broke the stream.")
        if not meter.usage:
            return await self._fail(send, "upstream_error",
                                    "The upstream ended the stream early.")
        # A stream that ended without [DONE] (the Responses API has none) ends cleanly.
        closing = b"data: [DONE]\n\n" if attempt.operation == "chat" else b""
        await self._complete(send, closing)

    async def _complete(self, send, out: bytes) -> None:
        self.status = self.outcome = "completed"
        self.gateway.stream_ending(self.attempt, self.meter.deltas)  # before the last bytes
        await send({"type": "http.response.body", "body": out, "more_body": False})
        self.attempt.delivered_tokens = self.meter.deltas

    async def _fail(self, send, code: str, message: str) -> None:
        self.status, self.outcome = "failed", code
        self.gateway.stream_ending(self.attempt, self.attempt.delivered_tokens)
        await send({"type": "http.response.body", "body": sse_error(message=message, code=code),
                    "more_body": False})

    def _metered(self) -> None:
        """What the attempt reports: the upstream's usage if it came; else its progress, the
        output deltas written to the client, one token each (each carries one or more: a
        lower bound)."""
        self.attempt.usage = self.meter.usage

    async def _drained(self) -> bool:
        """Read the upstream's answer to its end (after [DONE] only its terminator is left)."""
        try:
            async with asyncio.timeout(DRAIN_SECONDS):
                for _ in range(16):
                    if not await self.upstream.readany():
                        return True
        except (TimeoutError, HttpError):
            pass
        return False
