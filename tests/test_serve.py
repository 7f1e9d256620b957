"""The production server's processes (config/serve.py: uvicorn's supervisor and its workers),
for real: a worker that dies is started again and runs the application's startup before it
serves; SIGTERM lets a request in flight finish, and does not wait for ever on one that never
does."""

import os
import signal
import socket
import time

import httpx
import psutil
import pytest

from tests.server import sluice_server

pytestmark = pytest.mark.django_db(transaction=True)  # the server's processes read the rows
AUTHORIZE = "/api/gateway/v1/authorize"


def _supervisor(port: int) -> psutil.Process:
    return next(p for p in psutil.Process().children()
                if f"127.0.0.1:{port}" in " ".join(p.cmdline()))


def _workers(port: int) -> list[psutil.Process]:
    return [p for p in _supervisor(port).children()
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE
            and "--multiprocessing-fork" in " ".join(p.cmdline())]


def _until(check, what: str):
    """Polls `check` until it returns something true (a bound on tries, not a timing)."""
    for _ in range(1200):
        result = check()
        if result:
            return result
        time.sleep(0.05)
    raise AssertionError(f"never: {what}")


def _lines(log, text: str) -> int:
    return log.read_text().count(text)


def test_killed_workers_are_started_again_and_run_the_startup_before_they_serve(tmp_path):
    log = tmp_path / "server.log"
    with sluice_server(workers=2, log=log) as (base, port):
        _until(lambda: _lines(log, "Application startup complete.") == 2, "both workers up")
        first = {p.pid for p in _workers(port)}
        assert len(first) == 2
        for pid in first:  # every worker at once: whatever answers next was started again
            os.kill(pid, signal.SIGKILL)
        again = _until(lambda: len(now := {p.pid for p in _workers(port)} - first) == 2 and now,
                       "two new workers")
        _until(lambda: _lines(log, "Application startup complete.") == 4, "their startups")
        for _ in range(10):  # new connections, so each may go to either worker
            assert httpx.get(f"{base}/healthz", headers={"Connection": "close"}).status_code \
                == 200
        assert {p.pid for p in _workers(port)} == again
    text = log.read_text()
    assert text.count("Started server process") == 4  # lifespan startup once per worker
    assert text.count("Application startup complete.") == 4


def _partial_request(port: int) -> socket.socket:
    """An authorize whose headers and half a body are in: a request in flight."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(f"POST {AUTHORIZE} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer nope"
                 f"\r\nContent-Type: application/json\r\nContent-Length: 4\r\n\r\n{{}}".encode())
    return sock


def _answer(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_sigterm_lets_a_request_in_flight_finish_and_gives_up_on_one_that_never_does(tmp_path):
    log = tmp_path / "server.log"
    with sluice_server(workers=1, log=log) as (_, port):
        _until(lambda: _lines(log, "Application startup complete.") == 1, "the worker up")
        finishing, stuck = _partial_request(port), _partial_request(port)
        supervisor = _supervisor(port)
        supervisor.send_signal(signal.SIGTERM)
        _until(lambda: _lines(log, "Waiting for connections to close") == 1,
               "the worker waiting for its requests in flight")
        finishing.sendall(b"  ")  # the rest of the body, after the server began to stop
        answer = _answer(finishing)  # to the end: the server closes the connection after it
        assert answer.startswith(b"HTTP/1.1 401 ") and b"connection: close" in answer.lower()
        assert supervisor.wait(timeout=120) == 0  # the stuck request did not keep it
        # Cancelled while its body was awaited (nothing reached Django): a 500, then closed.
        assert _answer(stuck).startswith(b"HTTP/1.1 500 ")
    assert "Cancel 1 running task(s), timeout graceful shutdown exceeded" in log.read_text()
