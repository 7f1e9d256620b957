"""The production web server: granian serving config.asgi (Django's WSGI application behind a
bridge that reads whole bodies first), in production, in `dev.py run` and in the benchmarks:

    python -m config.serve --bind 0.0.0.0:8000

Why granian and ASGI, not gunicorn's threads: a gateway's slow or stalled request body must
not hold a thread that should be deciding authorize calls. Granian (Rust, tokio) reads
requests; the bridge (sluice/asgi_bridge.py) collects each body on the event loop and only then
runs the request in a thread, so 40 clients trickling their bodies cost 40 coroutines and
nothing else (bench/slow_clients.py). It is one pip package: no buffering proxy to run. Django's
own ASGI handler was measured too: it also reads bodies first, but runs every sync view of a
process in one thread, and answered /healthz about 4x slower than this bridge.

Set in the environment it starts with:

- SLUICE_WEB_CONCURRENCY: worker processes (default 2; about one per core) and
  SLUICE_WEB_THREADS: threads per worker that run requests once their bodies are in
  (default 8): enough to overlap Redis and PostgreSQL waits.
- PROMETHEUS_MULTIPROC_DIR: a directory, writable by the workers, that exists and is EMPTY
  when the server starts (create it fresh, or wipe it, at every start; one per server, never
  shared). Each worker writes its metric samples there and /metrics sums them
  (quotas/gateway/metrics.py). Files left over from an earlier start are added to the new
  counts; set to a missing directory, the application fails to load.
"""

import argparse
import os

from granian import Granian
from granian.constants import Interfaces


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
    Granian(
        args.app, address=host or "127.0.0.1", port=int(port), interface=Interfaces.ASGI,
        workers=args.workers, backlog=2048, log_access=args.access_log,
        # A worker that dies (out of memory, a crash in an extension) is started again.
        respawn_failed_workers=True, workers_kill_timeout=10,
    ).serve()


if __name__ == "__main__":
    main()
