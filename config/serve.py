"""The production web server: uvicorn (uvloop, httptools) serving config.asgi (the hook answered
on the event loop, Django's WSGI application behind a bridge that reads whole bodies first), in
production, in `dev.py run` and in the benchmarks:

    python -m config.serve --bind 0.0.0.0:8000

Why an ASGI server, not gunicorn's threads: a gateway's slow or stalled request body must not
hold a thread that should be deciding authorize calls. The bridge (sluice/asgi_bridge.py)
collects each body on the event loop and only then runs the request in a thread, so 40 clients
trickling their bodies cost 40 coroutines and nothing else (bench/slow_clients.py). It is one
pip package: no buffering proxy to run. Django's own ASGI handler was measured too: it also
reads bodies first, but runs every sync view of a process in one thread, and answered /healthz
about 4x slower than this bridge. Why uvicorn: its workers parse HTTP in C (httptools) on their
own event loop (uvloop), with no hand-off between threads per request. Through the reference
gateway it costs Sluice a quarter less CPU per request than granian (Rust, tokio), whose runtime
and thread hand-offs were most of a worker's CPU (bench/README.md).

The server, as configured in main():

- A supervisor process and SLUICE_WEB_CONCURRENCY workers, even for a single worker: a worker
  that dies (out of memory, a crash in an extension) or stops answering the supervisor's ping
  for 5 s is killed and started again. A worker that fails before it serves (settings, a broken
  import) stops the server instead, exit status 3: it would fail the same way on every restart.
- Each worker listens on a socket of its own (backlog 2048), all bound to the address with
  SO_REUSEPORT, and the kernel spreads new connections across them. On one socket shared by
  every worker, whichever worker's loop wakes first accepts every connection waiting (uvloop
  accepts until none is left): 24 connections opened at once all went to one of two workers,
  and half the cores idled. The supervisor binds the address first (without listening) so that
  a port in use fails the start at once. A worker's socket dies with it: connections it had
  not accepted yet are reset, as its accepted ones are.
- Each worker runs the application's lifespan startup once (config/asgi.py's worker_ready).
- X-Forwarded-* headers are passed to the application untouched: the client's address is
  ClientAddressMiddleware's business (sluice/client_address.py, its own trusted proxies) and
  https is SLUICE_TRUST_X_FORWARDED_PROTO's.
- A kept-alive connection is closed after KEEP_ALIVE_SECONDS without a request, never while
  one is in flight. That is longer than the idle timeouts of the load balancers in front of it
  (60 s is the usual default): the side that closes an idle connection should be the one that
  knows no request is on its way. A client that does write as the server closes (a gateway's
  sluice_client.http1 pool) sees the connection closed with nothing read, and tries once more
  on a new one.
- SIGTERM (or SIGINT): each worker stops accepting, lets requests in flight finish for up to
  GRACEFUL_SECONDS, then cancels what is left and exits.

Set in the environment it starts with:

- SLUICE_WEB_CONCURRENCY: worker processes (default 2; about one per core) and
  SLUICE_WEB_THREADS: threads per worker that run requests once their bodies are in
  (default 8): enough to overlap Redis and PostgreSQL waits.
- PROMETHEUS_MULTIPROC_DIR (optional): where the workers write their metric samples, which
  /metrics sums (quotas/hook/metrics.py). Unset, the server makes a fresh private directory
  for this start and removes it when it stops, which is what a deployment wants. Set, it must
  exist and be EMPTY when the server starts (one per server, never shared): files left over
  from an earlier start are added to the new counts; a missing directory fails the start.
"""

import argparse
import atexit
import os
import shutil
import socket
import sys
import tempfile

from uvicorn import Config
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors import Multiprocess

KEEP_ALIVE_SECONDS = 75
GRACEFUL_SECONDS = 10


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m config.serve")
    parser.add_argument("--bind", default="127.0.0.1:8000", help="host:port")
    parser.add_argument("--app", default="config.asgi:application",
                        help="the ASGI application (the benchmarks wrap it)")
    parser.add_argument("--workers", type=int,
                        default=int(os.environ.get("SLUICE_WEB_CONCURRENCY", "2")))
    parser.add_argument("--access-log", action="store_true")
    args = parser.parse_args(argv)
    host, _, port = args.bind.rpartition(":")
    metrics_dir_provide()
    config = Config(
        args.app, host=host or "127.0.0.1", port=int(port), workers=args.workers,
        loop="uvloop", http="httptools", ws="none", interface="asgi3", lifespan="on",
        proxy_headers=False, backlog=2048, timeout_keep_alive=KEEP_ALIVE_SECONDS,
        timeout_graceful_shutdown=GRACEFUL_SECONDS, timeout_worker_healthcheck=5,
        log_level="info", access_log=args.access_log)
    try:
        claimed = listening_socket(config.host, config.port)  # held until the server stops
    except OSError as exc:
        sys.exit(f"cannot bind {args.bind}: {exc}")
    # The supervisor even for one worker: uvicorn.run() would serve a single worker in this
    # process, and nothing would start it again.
    supervisor = Multiprocess(config, sockets=[WorkerSocket(config.host, config.port)])
    supervisor.run()
    claimed.close()
    if any(worker.exitcode == STARTUP_FAILURE for worker in supervisor.processes):
        sys.exit(STARTUP_FAILURE)


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to (host, port) in its SO_REUSEPORT group (Linux: sockets of the
    same user only), not yet listening."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


class WorkerSocket:
    """What the supervisor passes every worker it starts, a restarted one too, as its sockets:
    unpickled in the worker, it is a new listening_socket of that worker's own."""

    def __init__(self, host: str, port: int):
        self.address = (host, port)

    def __reduce__(self):
        return listening_socket, self.address


def metrics_dir_provide() -> str:
    """PROMETHEUS_MULTIPROC_DIR for the workers (they inherit the environment): the one set,
    or else a new empty directory of this start's own, removed at exit. Without one, each
    worker would count alone and /metrics would show whichever worker answered."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return os.environ["PROMETHEUS_MULTIPROC_DIR"]
    path = tempfile.mkdtemp(prefix="sluice-metrics-")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
    return path


if __name__ == "__main__":
    main()
