"""The production web server (config/serve.py: uvicorn, authorize on its event loop, the rest
through the bridge) as a real process on a free port, on the test's databases. Tests that use
it commit their rows (django_db(transaction=True)): the server's processes read them."""

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
from django.conf import settings
from django.db import connection

from tests.private_redis import free_port

ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def sluice_server(*, workers: int = 1, threads: int = 4, env: dict | None = None,
                  log: Path | None = None):
    """(base URL, port) of the server, in debug mode as `dev.py run` starts it (production
    settings want a deployment's environment). `env`: more of it (SLUICE_* settings); `log`:
    a file for what the server logs (else the test's stderr)."""
    db = connection.settings_dict
    port = free_port()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")},
           "DJANGO_SETTINGS_MODULE": "config.settings.base", "SLUICE_DEBUG": "1",
           "SLUICE_LOG_LEVEL": "WARNING",
           # The run's own URL (TCP, or the embedded server's socket) on the test database.
           "DATABASE_URL": urlunsplit(urlsplit(os.environ["DATABASE_URL"])._replace(
               path=f"/{db['NAME']}")),
           "REDIS_URL": settings.REDIS_URL, "SLUICE_WEB_CONCURRENCY": str(workers),
           "SLUICE_WEB_THREADS": str(threads), "PROMETHEUS_MULTIPROC_DIR": tempfile.mkdtemp(),
           **(env or {})}
    stderr = log.open("ab") if log is not None else None
    process = subprocess.Popen(  # noqa: S603 - our own server
        [sys.executable, "-m", "config.serve", "--bind", f"127.0.0.1:{port}"], cwd=ROOT,
        env=env, stdout=subprocess.DEVNULL, stderr=stderr)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if httpx.get(f"{base}/healthz").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.05)  # waiting for start-up, not asserting on time
        yield base, port
    finally:
        process.terminate()
        process.wait()
        if stderr is not None:
            stderr.close()
