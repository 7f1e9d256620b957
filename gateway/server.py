"""The gateway's HTTP/1.1 protocol: uvicorn's server around it, a leaner connection inside.

uvicorn runs the gateway (`python -m gateway`): its workers, signals, graceful shutdown,
keep-alive timeout, concurrency limit and lifespan are used as they are. What it plugs in for
each connection (`uvicorn.run(..., http="gateway.server:GatewayProtocol")`, the documented
extension point) is this protocol instead of uvicorn's httptools one. Both parse with
httptools (llhttp, in C) and speak ASGI; this one does less per request, because a gateway's
answers are small and many:

- A response's head is written with its first body bytes, one write (one system call, ~15 µs
  on a 2-core VM) instead of two. A head whose body does not follow at once (a stream waiting
  for its first token) leaves at the end of the loop's turn.
- No per-request header regular expressions: a header with CR or LF is refused by two byte
  searches; names and values come from the gateway, its configuration and httptools-parsed
  answers.
- The scope is built once per request from the parsed parts, with no URL object.
- The scope's extension `gateway.disconnect` (DISCONNECT_WATCH) takes a callback the protocol
  calls when the client leaves before its answer is complete: the gateway watches a request
  without a task waiting on `receive()` (a task made and cancelled per request).

It is a general ASGI HTTP server protocol (tests drive it with raw sockets: keep-alive,
pipelining, chunked bodies, 100-continue, disconnects), not a gateway-only shortcut.
"""

import asyncio
import collections
import http
import logging
from urllib.parse import unquote

import httptools

logger = logging.getLogger("uvicorn.error")

PROTOCOL = "gateway.server:GatewayProtocol"  # uvicorn's `http` setting that serves with it
# The scope's extension: a function taking a callback, called (no argument) once if the client
# leaves before the answer is complete; it returns the function that withdraws the callback.
DISCONNECT_WATCH = "gateway.disconnect"

# Request body bytes buffered before reading pauses (the application reads slower than the
# client sends); reading resumes when the application asks for more.
BODY_HIGH_WATER = 2 ** 16


def _status_line(status: int) -> bytes:
    try:
        phrase = http.HTTPStatus(status).phrase.encode()
    except ValueError:
        phrase = b""
    return b"HTTP/1.1 %d %s\r\n" % (status, phrase)


STATUS_LINES = {status: _status_line(status) for status in range(100, 600)}
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
DISCONNECT = {"type": "http.disconnect"}


class GatewayProtocol(asyncio.Protocol):
    """One client connection (uvicorn makes one per accepted socket)."""

    def __init__(self, config, server_state, app_state, _loop=None):
        if not config.loaded:
            config.load()
        self.app = config.loaded_app
        self.loop = _loop or asyncio.get_event_loop()
        self.server_state = server_state
        self.app_state = app_state
        self.keep_alive_seconds = config.timeout_keep_alive
        self.limit_concurrency = config.limit_concurrency
        self.root_path = config.root_path
        self.parser = httptools.HttpRequestParser(self)
        # Answer the first of pipelined requests sent after a Connection: close.
        self.parser.set_dangerous_leniencies(lenient_data_after_close=True)
        self.transport: asyncio.Transport | None = None
        self.server = self.client = None
        self.exchange: Exchange | None = None  # the request being answered
        self.pipeline: collections.deque[Exchange] = collections.deque()
        self.keep_alive_timer: asyncio.TimerHandle | None = None
        self.read_paused = self.write_paused = False
        self.writable: asyncio.Future | None = None  # while writing is paused
        # the request being parsed
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.expect_continue = False

    # --- asyncio -----------------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.server_state.connections.add(self)
        self.transport = transport
        self.server = _address(transport.get_extra_info("sockname"))
        self.client = _address(transport.get_extra_info("peername"))

    def connection_lost(self, exc) -> None:
        self.server_state.connections.discard(self)
        self._keep_alive_stop()
        for exchange in (self.exchange, *self.pipeline):
            if exchange is not None and not exchange.complete:
                exchange.disconnected = True
                exchange.wake()
                if exchange.on_disconnect is not None:
                    callback, exchange.on_disconnect = exchange.on_disconnect, None
                    callback()
        self.resume_writing()
        self.parser = None

    def eof_received(self) -> None:
        return None  # the transport closes: a half-closed client gets no answer either

    def data_received(self, data: bytes) -> None:
        self._keep_alive_stop()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            pass  # no protocol to switch to: the request is answered over HTTP/1.1
        except httptools.HttpParserError:
            self._refuse(400, b"Invalid HTTP request received.")

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        if self.writable is not None:
            if not self.writable.done():
                self.writable.set_result(None)
            self.writable = None

    async def drain(self) -> None:
        if self.writable is None:
            self.writable = self.loop.create_future()
        await self.writable

    def pause_reading(self) -> None:
        if not self.read_paused:
            self.read_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.read_paused:
            self.read_paused = False
            self.transport.resume_reading()

    # --- httptools ---------------------------------------------------------------------------
    def on_message_begin(self) -> None:
        self.url = b""
        self.headers = []
        self.expect_continue = False

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"expect" and value.lower() == b"100-continue":
            self.expect_continue = True
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        parser = self.parser
        version = parser.get_http_version()
        if self.url.startswith(b"/"):
            raw_path, _, query = self.url.partition(b"?")
        else:  # absolute form (or "*"): httptools splits it
            parsed = httptools.parse_url(self.url)
            raw_path, query = parsed.path or b"/", parsed.query or b""
        path = raw_path.decode("latin-1")
        if "%" in path:
            path = unquote(path)
        scope = {
            "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": version, "method": parser.get_method().decode("ascii"),
            "scheme": "http", "path": self.root_path + path,
            "raw_path": self.root_path.encode() + raw_path, "query_string": query,
            "root_path": self.root_path, "headers": self.headers,
            "server": self.server, "client": self.client,
        }
        exchange = Exchange(self, scope, keep_alive=version != "1.0"
                            and parser.should_keep_alive(), expect_continue=self.expect_continue)
        scope["extensions"] = {DISCONNECT_WATCH: exchange.watch}
        if self.app_state:
            scope["state"] = self.app_state.copy()
        if self.exchange is None or self.exchange.complete:
            self._start(exchange)
        else:  # pipelined: answered in order, after the one in hand
            self.pipeline.append(exchange)
            self.pause_reading()

    def on_body(self, body: bytes) -> None:
        exchange = self.pipeline[-1] if self.pipeline else self.exchange
        if exchange is None or exchange.complete:
            return  # the rest of a body the application answered without reading
        exchange.body.append(body)
        exchange.buffered += len(body)
        if exchange.buffered > BODY_HIGH_WATER:
            self.pause_reading()
        exchange.wake()

    def on_message_complete(self) -> None:
        exchange = self.pipeline[-1] if self.pipeline else self.exchange
        if exchange is None or exchange.complete:
            return
        exchange.more_body = False
        exchange.wake()

    # --- requests ----------------------------------------------------------------------------
    def _start(self, exchange: "Exchange") -> None:
        self.exchange = exchange
        state = self.server_state
        if self.limit_concurrency is not None and (
                len(state.connections) >= self.limit_concurrency
                or len(state.tasks) >= self.limit_concurrency):
            logger.warning("Exceeded concurrency limit.")
            exchange.keep_alive = False
            app = _service_unavailable
        else:
            app = self.app
        task = self.loop.create_task(exchange.run(app))
        task.add_done_callback(state.tasks.discard)
        state.tasks.add(task)

    def answered(self) -> None:
        """The exchange in hand wrote its last bytes."""
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self.resume_reading()
        if self.pipeline:
            self._start(self.pipeline.popleft())
        else:
            self.keep_alive_timer = self.loop.call_later(self.keep_alive_seconds,
                                                         self._keep_alive_expired)

    def shutdown(self) -> None:
        """uvicorn's graceful shutdown: close when idle, else after the answer in hand."""
        if self.exchange is None or self.exchange.complete:
            self.transport.close()
        else:
            self.exchange.keep_alive = False

    def _keep_alive_stop(self) -> None:
        if self.keep_alive_timer is not None:
            self.keep_alive_timer.cancel()
            self.keep_alive_timer = None

    def _keep_alive_expired(self) -> None:
        self.keep_alive_timer = None
        if not self.transport.is_closing():
            self.transport.close()

    def _refuse(self, status: int, message: bytes) -> None:
        self.transport.write(b"".join([
            STATUS_LINES[status], _default_lines(self.server_state)[0],
            b"content-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\n"
            b"connection: close\r\n\r\n" % len(message), message]))
        self.transport.close()


class Exchange:
    """One request and its answer: the ASGI `receive` and `send` of one application call."""

    __slots__ = ("protocol", "scope", "keep_alive", "expect_continue", "body", "buffered",
                 "more_body", "body_done", "waiter", "started", "complete", "disconnected",
                 "chunked", "head", "head_only", "on_disconnect")

    def __init__(self, protocol: GatewayProtocol, scope: dict, *, keep_alive: bool,
                 expect_continue: bool):
        self.protocol, self.scope = protocol, scope
        self.keep_alive, self.expect_continue = keep_alive, expect_continue
        self.body: list[bytes] = []
        self.buffered = 0
        self.more_body = True     # the client has more of the body to send
        self.body_done = False    # the application was handed the body's end
        self.waiter: asyncio.Future | None = None
        self.started = self.complete = self.disconnected = self.chunked = False
        self.head: bytes | None = None  # the response's head, until its body bytes join it
        self.head_only = scope["method"] == "HEAD"
        self.on_disconnect = None

    def watch(self, callback):
        """DISCONNECT_WATCH: `callback()` once if the client leaves before the answer is
        complete (at once if it has left already)."""
        if self.disconnected:
            callback()
            return _nothing
        self.on_disconnect = callback
        return self._unwatch

    def _unwatch(self) -> None:
        self.on_disconnect = None

    def wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    async def run(self, app) -> None:
        protocol = self.protocol
        try:
            await app(self.scope, self.receive, self.send)
        except BaseException as exc:
            logger.error("Exception in ASGI application\n", exc_info=exc)
            if not self.started:
                await self._internal_error()
            else:
                protocol.transport.close()
        else:
            if not self.started and not self.disconnected:
                logger.error("ASGI callable returned without starting response.")
                await self._internal_error()
            elif not self.complete and not self.disconnected:
                logger.error("ASGI callable returned without completing response.")
                protocol.transport.close()

    async def receive(self) -> dict:
        protocol = self.protocol
        if self.expect_continue:
            self.expect_continue = False
            if not protocol.transport.is_closing():
                protocol.transport.write(CONTINUE)
        while not (self.disconnected or self.complete):
            if self.body or not (self.more_body or self.body_done):
                chunks, self.body, self.buffered = self.body, [], 0
                self.body_done = not self.more_body
                return {"type": "http.request",
                        "body": chunks[0] if len(chunks) == 1 else b"".join(chunks),
                        "more_body": self.more_body}
            if protocol.exchange is self:
                protocol.resume_reading()
            self.waiter = protocol.loop.create_future()
            try:
                await self.waiter
            finally:
                self.waiter = None
        return DISCONNECT

    async def send(self, message: dict) -> None:
        protocol = self.protocol
        if protocol.write_paused and not self.disconnected:
            await protocol.drain()
        if self.disconnected:
            return
        if not self.started:
            if message["type"] != "http.response.start":
                raise RuntimeError(f"Expected ASGI message 'http.response.start', but got "
                                   f"'{message['type']}'.")
            self._start(message)
            return
        if self.complete:
            raise RuntimeError(f"Unexpected ASGI message '{message['type']}' sent, after the "
                               f"response completed.")
        if message["type"] != "http.response.body":
            raise RuntimeError(f"Expected ASGI message 'http.response.body', but got "
                               f"'{message['type']}'.")
        body = b"" if self.head_only else message.get("body", b"")
        more = message.get("more_body", False)
        if self.chunked:
            data = b"%x\r\n%b\r\n" % (len(body), body) if body else b""
            if not more:
                data += b"0\r\n\r\n"
        else:
            data = body
        if self.head is not None:
            data, self.head = self.head + data, None
        if data:
            protocol.transport.write(data)
        if not more:
            self.complete = True
            self.wake()  # a receive() waiting for the disconnect returns
            if not self.keep_alive:
                protocol.transport.close()
            protocol.answered()

    def _start(self, message: dict) -> None:
        status = message["status"]
        defaults, default_count = _default_lines(self.protocol.server_state)
        lines = [STATUS_LINES[status], defaults]
        headers = message.get("headers", ())
        if not isinstance(headers, list | tuple):
            headers = list(headers)
        framed = closing = False
        for name, value in headers:
            lower = name.lower()
            if lower == b"content-length":
                framed = True
            elif lower == b"transfer-encoding":
                framed = True
                self.chunked = b"chunked" in value.lower()
            elif lower == b"connection" and b"close" in value.lower():
                self.keep_alive, closing = False, True
            lines += (name, b": ", value, b"\r\n")
        if not framed and not self.head_only and status not in (204, 304):
            self.chunked = True
            lines.append(b"transfer-encoding: chunked\r\n")
        if not self.keep_alive and not closing:
            lines.append(b"connection: close\r\n")
        lines.append(b"\r\n")
        head = b"".join(lines)
        # Every line ends in CRLF, and no CR or LF is anywhere else: a header name or value
        # holding one (response splitting) shows as a count that does not add up. Three byte
        # counts in C instead of four searches per header.
        added = len(lines) - 3 - 4 * len(headers)  # the lines added here (framing, close)
        ends = 1 + default_count + len(headers) + added + 1  # status, headers, blank line
        if not head.count(b"\r\n") == head.count(b"\n") == head.count(b"\r") == ends:
            raise RuntimeError("Invalid HTTP header (CR or LF).")
        self.started = True
        self.expect_continue = False  # the body was not asked for: no 100 Continue now
        self.head = head
        # The body's first bytes usually follow at once and take the head with them; a
        # stream's wait for its first token must not hold the head back.
        self.protocol.loop.call_soon(self._head_flush)

    def _head_flush(self) -> None:
        if self.head is not None and not self.disconnected:
            head, self.head = self.head, None
            self.protocol.transport.write(head)

    async def _internal_error(self) -> None:
        self.keep_alive = False
        await self.send({"type": "http.response.start", "status": 500, "headers": [
            (b"content-type", b"text/plain; charset=utf-8"), (b"content-length", b"21"),
            (b"connection", b"close")]})
        await self.send({"type": "http.response.body", "body": b"Internal Server Error"})


async def _service_unavailable(scope, receive, send) -> None:
    await send({"type": "http.response.start", "status": 503, "headers": [
        (b"content-type", b"text/plain; charset=utf-8"), (b"content-length", b"19"),
        (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": b"Service Unavailable"})


# uvicorn's default headers (a new list each second), encoded, and their count
_default_encoded: list = [None, (b"", 0)]


def _default_lines(server_state) -> tuple[bytes, int]:
    """The server's default headers (date, server) as header lines, encoded once per change,
    and how many."""
    headers = server_state.default_headers
    if _default_encoded[0] is not headers:
        _default_encoded[:] = [headers, (b"".join(b"%s: %s\r\n" % (name, value)
                                                  for name, value in headers), len(headers))]
    return _default_encoded[1]


def _nothing() -> None:
    pass


def _address(info) -> tuple[str, int] | None:
    if isinstance(info, tuple) and len(info) >= 2:
        return str(info[0]), int(info[1])
    return None
