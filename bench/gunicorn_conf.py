"""gunicorn configuration used by the benchmarks (the production settings: DEBUG off).

Workers: SLUICE_WEB_CONCURRENCY processes. With GUNICORN_THREADS > 1 the gthread worker keeps
connections alive (gateways hold persistent connections to the hook)."""

import os

from prometheus_client import multiprocess

workers = int(os.environ.get("SLUICE_WEB_CONCURRENCY", "2"))
threads = int(os.environ.get("GUNICORN_THREADS", "1"))
worker_class = "gthread" if threads > 1 else "sync"
keepalive = 30
backlog = 2048
accesslog = None
preload_app = True


def child_exit(server, worker):
    multiprocess.mark_process_dead(worker.pid)
