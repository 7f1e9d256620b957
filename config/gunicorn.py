"""gunicorn configuration of the web process, in production and in the benchmarks (DEBUG off):

    gunicorn config.wsgi:application -c config/gunicorn.py --bind 0.0.0.0:8000

SLUICE_WEB_CONCURRENCY processes x GUNICORN_THREADS threads of the gthread worker, which keeps
connections alive (gateways hold persistent connections to the hook). Threads let a worker
use the CPU while another request waits on Redis; several processes sidestep the GIL.
Command-line options override this file (e.g. `--threads 4`, `--access-logfile -`).

A deployment must set, in the environment gunicorn starts with:

- SLUICE_WEB_CONCURRENCY: worker processes (default 2; about one per core, the benchmarks
  use 3 on 2 cores) and GUNICORN_THREADS: threads per worker (default 4).
- PROMETHEUS_MULTIPROC_DIR: a directory, writable by the workers, that exists and is EMPTY
  when gunicorn starts (create it fresh, or wipe it, at every start; one per gunicorn, never
  shared between instances). Each worker writes its metric samples there and /metrics sums
  them (quotas/gateway/metrics.py). It must be in the environment before gunicorn starts:
  prometheus_client chooses its multiprocess mode when it is imported, which (preload_app)
  happens in the master before the workers fork. Without it every worker counts alone and
  /metrics shows the counters of whichever worker answered; set to a missing directory, the
  application fails to load. Files left over from an earlier start are added to the new counts.
"""

import os

from prometheus_client import multiprocess

workers = int(os.environ.get("SLUICE_WEB_CONCURRENCY", "2"))
threads = int(os.environ.get("GUNICORN_THREADS", "4"))
# gthread even with one thread: unlike sync workers it keeps connections alive.
worker_class = "gthread"
keepalive = 30
backlog = 2048
accesslog = None
preload_app = True


def child_exit(server, worker):
    multiprocess.mark_process_dead(worker.pid)
