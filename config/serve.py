"""The production web server: granian serving config.asgi (the hook answered on the event loop,
Django's WSGI application behind a bridge that reads whole bodies first), in production, in
`dev.py run` and in the benchmarks:

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
import tempfile

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
    metrics_dir_provide()
    Granian(
        args.app, address=host or "127.0.0.1", port=int(port), interface=Interfaces.ASGI,
        workers=args.workers, backlog=2048, log_access=args.access_log,
        # A worker that dies (out of memory, a crash in an extension) is started again.
        respawn_failed_workers=True, workers_kill_timeout=10,
    ).serve()


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
