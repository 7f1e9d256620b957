"""The gateway's HTTP/1.1 protocol (gateway/server.py) in uvicorn's server, spoken to over raw
sockets: what any HTTP client may send it, byte for byte."""

import asyncio
import socket
import threading

import pytest

from gateway.server import DISCONNECT_WATCH, PROTOCOL
from gateway.serving import ServerThread


class App:
    """/echo: the body's length and the method; /stream: a head, then a body part each time
    the test sets `step`; /early: answers without reading the body; /watch: waits for the
    client to leave and records how it learnt; /boom: raises; /badheader: a header with LF."""

    def __init__(self):
        self.step = threading.Event()
        self.left = threading.Event()
        self.how_left: list[str] = []

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return
        path = scope["path"]
        if path == "/boom":
            raise RuntimeError("boom")
        if path == "/early":
            return await _answer(send, b"early", headers=[(b"connection", b"close")])
        if path == "/badheader":
            return await _answer(send, b"x", headers=[BAD_HEADERS[scope["query_string"]]])
        if path == "/watch":
            gone = asyncio.Event()
            scope["extensions"][DISCONNECT_WATCH](gone.set)
            await gone.wait()
            self.how_left.append("callback")
            self.left.set()
            return
        body, more = b"", True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
        if path == "/stream":
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"text/event-stream")]})
            for part in (b"one", b"two"):
                await asyncio.get_running_loop().run_in_executor(None, self.step.wait, 10)
                self.step.clear()
                await send({"type": "http.response.body", "body": part, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        await _answer(send, b"%s %d %s" % (scope["method"].encode(), len(body),
                                           scope["query_string"] or b"-"))


BAD_HEADERS = {b"lf": (b"x-evil", b"a\nb"), b"cr": (b"x-evil", b"a\rb"),
               b"crlf": (b"x-evil", b"a\r\nset-cookie: x=1"), b"name": (b"x-evil\r\nx", b"1")}


async def _answer(send, body: bytes, headers=()):
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", b"%d" % len(body)), *headers]})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture
def served():
    app = App()
    server = ServerThread(app, http=PROTOCOL).start()
    yield app, server
    server.stop()


def connect(server) -> socket.socket:
    sock = socket.create_connection((server.host, server.port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def read_answer(sock, buffer: bytearray) -> tuple[bytes, dict, bytes]:
    """One answer (status line, headers, body by content-length or chunked)."""
    while b"\r\n\r\n" not in buffer:
        _recv_into(sock, buffer)
    head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
    del buffer[:len(head) + 4]
    status, *lines = head.split(b"\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(b":") for line in lines)}
    if b"content-length" in headers:
        size = int(headers[b"content-length"])
        while len(buffer) < size:
            _recv_into(sock, buffer)
        body = bytes(buffer[:size])
        del buffer[:size]
        return status, headers, body
    body = b""
    while True:
        while b"\r\n" not in buffer:
            _recv_into(sock, buffer)
        size_line, _, _ = bytes(buffer).partition(b"\r\n")
        size = int(size_line, 16)
        while len(buffer) < len(size_line) + 2 + size + 2:
            _recv_into(sock, buffer)
        body += bytes(buffer[len(size_line) + 2:len(size_line) + 2 + size])
        del buffer[:len(size_line) + 2 + size + 2]
        if size == 0:
            return status, headers, body


def _recv_into(sock, buffer: bytearray) -> None:
    data = sock.recv(65536)
    if not data:
        raise ConnectionError("closed")
    buffer += data


def closed(sock) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def post(path: str, body: bytes = b"", extra: bytes = b"") -> bytes:
    return (b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n%s\r\n"
            % (path.encode(), len(body), extra)) + body


def test_keep_alive_answers_requests_in_turn_on_one_connection(served):
    _, server = served
    sock, buffer = connect(server), bytearray()
    for n in (3, 70_000, 0):
        sock.sendall(post("/echo?x=1", b"a" * n))
        status, headers, body = read_answer(sock, buffer)
        assert status == b"HTTP/1.1 200 OK"
        assert body == b"POST %d x=1" % n
        assert headers[b"content-length"] == b"%d" % len(body)
        assert b"connection" not in headers
    sock.close()


def test_pipelined_requests_are_answered_in_order(served):
    _, server = served
    sock, buffer = connect(server), bytearray()
    sock.sendall(post("/echo", b"abc") + post("/echo", b"abcdef") + post("/echo?q", b""))
    assert [read_answer(sock, buffer)[2] for _ in range(3)] == [
        b"POST 3 -", b"POST 6 -", b"POST 0 q"]


def test_a_chunked_request_body_is_read_whole(served):
    _, server = served
    sock, buffer = connect(server), bytearray()
    sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                 b"5\r\nhello\r\n")
    sock.sendall(b"6\r\n world\r\n0\r\n\r\n")
    assert read_answer(sock, buffer)[2] == b"POST 11 -"


def test_expect_100_continue_is_answered_when_the_body_is_read_and_not_before(served):
    _, server = served
    sock, buffer = connect(server), bytearray()
    sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n"
                 b"Expect: 100-continue\r\n\r\n")
    while b"\r\n\r\n" not in buffer:
        _recv_into(sock, buffer)
    assert bytes(buffer) == b"HTTP/1.1 100 Continue\r\n\r\n"
    del buffer[:]
    sock.sendall(b"body")
    assert read_answer(sock, buffer)[2] == b"POST 4 -"
    # An answer given without reading the body sends no 100 Continue, and closes.
    sock = connect(server)
    sock.sendall(b"POST /early HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n"
                 b"Expect: 100-continue\r\n\r\n")
    status, headers, body = read_answer(sock, buffer := bytearray())
    assert (status, body, headers[b"connection"]) == (b"HTTP/1.1 200 OK", b"early", b"close")
    assert closed(sock)


def test_a_stream_gets_its_head_before_its_first_body_and_is_chunked(served):
    app, server = served
    sock, buffer = connect(server), bytearray()
    sock.sendall(post("/stream"))
    while b"\r\n\r\n" not in buffer:  # the head arrives while the body waits for `step`
        _recv_into(sock, buffer)
    assert buffer.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"transfer-encoding: chunked" in buffer
    app.step.set()
    while not buffer.endswith(b"3\r\none\r\n"):
        _recv_into(sock, buffer)
    app.step.set()
    status, headers, body = read_answer(sock, buffer)
    assert body == b"onetwo"


def test_head_and_http_1_0(served):
    _, server = served
    sock, buffer = connect(server), bytearray()
    sock.sendall(b"HEAD /echo HTTP/1.1\r\nHost: x\r\n\r\n")
    while b"\r\n\r\n" not in buffer:
        _recv_into(sock, buffer)
    head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
    assert b"content-length: 8" in head and rest == b""  # the length of "HEAD 0 -", no body
    sock = connect(server)
    sock.sendall(b"POST /echo HTTP/1.0\r\nContent-Length: 2\r\n\r\nab")
    status, headers, body = read_answer(sock, bytearray())
    assert (body, headers[b"connection"]) == (b"POST 2 -", b"close")
    assert closed(sock)


def test_a_client_that_leaves_is_reported_through_the_watch_callback(served):
    app, server = served
    sock = connect(server)
    sock.sendall(post("/watch"))
    sock.close()
    assert app.left.wait(10)
    assert app.how_left == ["callback"]


def test_bad_requests_and_bad_applications(served):
    _, server = served
    sock = connect(server)
    sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
    status, headers, _ = read_answer(sock, bytearray())
    assert status.startswith(b"HTTP/1.1 400") and headers[b"connection"] == b"close"
    for path in ("/boom", *(f"/badheader?{k.decode()}" for k in BAD_HEADERS)):
        # the application fails before its answer started
        sock = connect(server)
        sock.sendall(post(path))
        status, headers, body = read_answer(sock, bytearray())
        assert (status, body) == (b"HTTP/1.1 500 Internal Server Error",
                                  b"Internal Server Error")
        assert closed(sock)
