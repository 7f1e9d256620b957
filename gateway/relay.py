"""Relaying an upstream's SSE stream to the client, token by token, while watching both ends.

The relay is a raw ASGI response so that it sees the client leave at once: a task waits on
`receive()` for `http.disconnect` and cancels the pump, which closes the upstream connection
(the upstream stops generating) and reports the request `cancelled` with the tokens sent.

The upstream's SSE is read line by line (aiohttp's `response.content` iteration) and passed on
one event at a time, as soon as its blank line arrives. Each chat completion chunk, and each
Responses API event that carries the response, says the tier Sluice served it on
(`service_tier`, as OpenAI's do), whatever the upstream wrote there.
"""


import aiohttp
import anyio
import orjson
from aiohttp.http_exceptions import HttpProcessingError

from gateway.attempt import Attempt
from gateway.errors import sse_error


class StreamRelay:
    def __init__(self, *, gateway, attempt: Attempt, upstream: aiohttp.ClientResponse,
                 client_wants_usage: bool, headers: dict):
        self.gateway, self.attempt, self.upstream = gateway, attempt, upstream
        self.client_wants_usage = client_wants_usage
        self.headers = headers
        # None from a Sluice that does not name tiers: the upstream's chunks pass unchanged.
        self.service_tier = attempt.grant.service_tier if attempt.grant else None
        self.status = "cancelled"   # until the pump says otherwise
        self.outcome = "cancelled"

    async def __call__(self, scope, receive, send) -> None:
        try:
            await send({"type": "http.response.start", "status": 200, "headers": [
                (b"content-type", b"text/event-stream; charset=utf-8"),
                (b"cache-control", b"no-cache"),
                *((k.encode(), str(v).encode()) for k, v in self.headers.items())]})
            async with anyio.create_task_group() as group:
                group.start_soon(self._watch_disconnect, receive, group.cancel_scope)
                await self._pump(send)
                group.cancel_scope.cancel()
        except* OSError:  # the client went away while we were writing to it
            pass
        finally:
            with anyio.CancelScope(shield=True):
                if self.status == "completed":
                    self.upstream.release()  # back to the pool if it was read to its end
                else:
                    self.upstream.close()  # the upstream sees the connection close and stops
                self.gateway.attempt_finish(self.attempt, status=self.status,
                                            outcome=self.outcome)

    @staticmethod
    async def _watch_disconnect(receive, scope: anyio.CancelScope) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        scope.cancel()

    async def _pump(self, send) -> None:
        lines: list[bytes] = []
        done = False
        try:
            async for line in self.upstream.content:
                line = line.rstrip(b"\r\n")  # servers may end SSE lines with CRLF
                if line:
                    lines.append(line)
                    continue
                if not lines:
                    continue  # blank lines between events
                out, tokens, done = self._filter([b"\n".join(lines)])
                lines = []
                if out:
                    await send({"type": "http.response.body", "body": out, "more_body": True})
                    if tokens:
                        self.attempt.first_token()
                        self.attempt.delivered_tokens += tokens
                if done:
                    break
        except TimeoutError:  # aiohttp's read timeouts are also ClientErrors
            return await self._fail(send, "upstream_timeout",
                                    "The upstream stopped sending tokens.")
        except (aiohttp.ClientError, HttpProcessingError):  # or a line over 2 × read_bufsize
            return await self._fail(send, "upstream_error", "The upstream broke the stream.")
        if not done and not self.attempt.usage:
            return await self._fail(send, "upstream_error",
                                    "The upstream ended the stream early.")
        self.status = self.outcome = "completed"
        closing = b"data: [DONE]\n\n" if self.attempt.operation == "chat" and not done else b""
        await send({"type": "http.response.body", "body": closing, "more_body": False})

    async def _fail(self, send, code: str, message: str) -> None:
        self.status, self.outcome = "failed", code
        await send({"type": "http.response.body", "body": sse_error(message=message, code=code),
                    "more_body": False})

    def _filter(self, events: list[bytes]) -> tuple[bytes, int, bool]:
        """The bytes to pass on, how many output tokens they carry, and whether [DONE] came."""
        out, tokens = [], 0
        for event in events:
            payload = _data(event)
            if payload is None:
                out.append(event + b"\n\n")  # comments and other fields pass as they are
                continue
            if payload == b"[DONE]":
                out.append(event + b"\n\n")
                return b"".join(out), tokens, True
            try:
                chunk = orjson.loads(payload)
            except orjson.JSONDecodeError:
                out.append(event + b"\n\n")
                continue
            if not isinstance(chunk, dict):
                out.append(event + b"\n\n")
                continue
            if self._tier_named(chunk):
                event = _data_replaced(event, orjson.dumps(chunk))
            if chunk.get("usage") and not chunk.get("choices"):
                self.attempt.usage = chunk["usage"]
                if self.client_wants_usage:
                    out.append(event + b"\n\n")
                continue
            kind = chunk.get("type")  # the Responses API's events
            if kind == "response.output_text.delta":
                tokens += 1
            elif kind == "response.completed":
                self.attempt.usage = (chunk.get("response") or {}).get("usage")
            for choice in chunk.get("choices") or ():
                delta = choice.get("delta") or {}
                if delta.get("content") or delta.get("tool_calls") or delta.get("refusal"):
                    tokens += 1
            out.append(event + b"\n\n")
        return b"".join(out), tokens, False

    def _tier_named(self, chunk: dict) -> bool:
        """Set the served tier where OpenAI's streams name one: on a chat completion chunk, and
        on the response a Responses API event carries. True if that changed the chunk."""
        if self.service_tier is None:
            return False
        if chunk.get("object") == "chat.completion.chunk":
            target = chunk
        elif isinstance(chunk.get("response"), dict):
            target = chunk["response"]
        else:
            return False
        if target.get("service_tier") == self.service_tier:
            return False
        target["service_tier"] = self.service_tier
        return True


def _data_replaced(event: bytes, payload: bytes) -> bytes:
    """`event` with its data lines replaced by one line of `payload`; its other fields (event:,
    id:) kept in their place."""
    lines = [line for line in event.split(b"\n") if not line.startswith(b"data:")]
    return b"\n".join([*lines, b"data: " + payload])


def _data(event: bytes) -> bytes | None:
    """The data of one SSE event (its `data:` lines joined), None if it has none."""
    lines = [line[5:].lstrip(b" ") for line in event.split(b"\n") if line.startswith(b"data:")]
    return b"\n".join(lines).strip() if lines else None

