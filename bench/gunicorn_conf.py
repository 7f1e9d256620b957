"""gunicorn configuration used by the benchmarks (the production settings: DEBUG off).

SLUICE_WEB_CONCURRENCY processes x GUNICORN_THREADS threads of the gthread worker, which keeps
connections alive (gateways hold persistent connections to the hook). Threads let a worker
use the CPU while another request waits on Redis; several processes sidestep the GIL."""

import os

from prometheus_client import multiprocess

workers = int(os.environ.get("SLUICE_WEB_CONCURRENCY", "2"))
threads = int(os.environ.get("GUNICORN_THREADS", "1"))
# gthread even with one thread: unlike sync workers it keeps connections alive.
worker_class = "gthread"
keepalive = 30
backlog = 2048
accesslog = None
preload_app = True


def child_exit(server, worker):
    multiprocess.mark_process_dead(worker.pid)
