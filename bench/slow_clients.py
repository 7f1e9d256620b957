"""Benchmark: authorize while 40 clients trickle their request bodies.

    DATABASE_URL=... REDIS_URL=redis://127.0.0.1:6379/14 python bench/slow_clients.py

Each slow client opens a connection to the server, sends the headers of an authorize POST
announcing a 1,000-byte body, then one byte of it every second, for the whole run. Meanwhile a
closed-loop client (4 connections, each a thread with http.client and a 5 s timeout, so that a
stalled server shows as timeouts instead of hanging the benchmark) asks authorize as fast as
answers come. The table compares authorize without and with the slow clients, on the
production server (config/serve.py: uvicorn, bodies read on the event loop).
"""

import argparse
import http.client
import json
import socket
import threading
import time

from common import django_setup, percentile, table, tenant_seed, web_server

PATH = "/api/gateway/v1/authorize"


class SlowSenders:
    """`count` connections that send headers, then one byte of body a second."""

    def __init__(self, port: int, count: int, headers: dict[str, str]):
        self.port, self.count, self.headers = port, count, headers
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.dropped = 0  # connections the server closed before the end

    def __enter__(self):
        self.thread.start()
        time.sleep(1.0)  # let every connection reach the server before measuring
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()

    def _run(self) -> None:
        extra = "".join(f"{k}: {v}\r\n" for k, v in self.headers.items())
        head = (f"POST {PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}"
                "Content-Length: 1000\r\n\r\n").encode()
        sockets = []
        for _ in range(self.count):
            s = socket.create_connection(("127.0.0.1", self.port))
            s.sendall(head + b"{")
            sockets.append(s)
        alive = set(sockets)
        while not self.stop.wait(1.0):
            for s in list(alive):
                try:
                    s.sendall(b" ")
                except OSError:  # the server gave up on it
                    alive.discard(s)
        self.dropped = len(sockets) - len(alive)
        for s in sockets:
            s.close()


def _ask(port, headers, body, seconds, out) -> None:
    """One connection asking authorize in a closed loop: (latency ms or None, status)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    deadline, n = time.perf_counter() + seconds, 0
    while time.perf_counter() < deadline:
        n += 1
        started = time.perf_counter()
        try:
            connection.request("POST", PATH, body(n), headers)
            response = connection.getresponse()
            response.read()
            out.append(((time.perf_counter() - started) * 1000, response.status))
        except (OSError, http.client.HTTPException):
            out.append((None, "timeout/error"))
            connection.close()
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    connection.close()


def _measure(port, headers, body, seconds, connections=4) -> list:
    out: list = []
    threads = [threading.Thread(target=_ask, args=(port, headers,
                                                   lambda n, c=c: body(c, n), seconds, out))
               for c in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--slow", type=int, default=40)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    django_setup()
    pool, _, _, api_key, gateway = tenant_seed()
    headers = {"Authorization": f"Bearer {gateway}", "Content-Type": "application/json"}
    head, tail = json.dumps({"request_id": "@", "api_key": api_key, "model": pool.model,
                             "input_tokens": 200, "max_output_tokens": 300}).encode().split(b"@")
    rows = []
    for kind in ("uvicorn",):
        with web_server(workers=args.workers) as port:
            for phase, slow in (("warm-up", 0), ("alone", 0), (f"{args.slow} slow", args.slow)):
                tag = f"{kind}-{slow}-{time.time_ns()}"

                def body(index, n, tag=tag):
                    return head + f"{tag}-{index}-{n}".encode() + tail

                senders = SlowSenders(port, slow, headers)
                with senders if slow else _nothing():
                    out = _measure(port, headers, body,
                                   1 if phase == "warm-up" else args.seconds)
                if phase != "warm-up":
                    ms = [m for m, _ in out if m is not None]
                    ok = sum(1 for _, status in out if status == 200)
                    rows.append([kind, phase, len(out), len(ms) / args.seconds,
                                 percentile(ms, 50), percentile(ms, 99), max(ms, default=0.0),
                                 f"{ok}/{len(out)}",
                                 f"{slow - senders.dropped}/{slow}" if slow else "-"])
    table(f"authorize (4 connections, closed loop, {args.seconds:.0f} s) without and with "
          f"{args.slow} clients trickling a body; {args.workers} worker processes",
          ["server", "phase", "answers", "req/s", "p50 ms", "p99 ms", "max ms", "200s",
           "slow clients connected to the end"], rows)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


if __name__ == "__main__":
    main()
