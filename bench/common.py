"""Shared by the benchmarks: Django set-up with the production settings, a seeded tenant, the
production web server, percentiles and table printing."""

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.base")
os.environ.setdefault("SLUICE_SECRET_KEY", "bench-only-secret-key-" + "x" * 40)
os.environ.setdefault("SLUICE_EMAIL_BACKEND", "django.core.mail.backends.locmem.EmailBackend")
os.environ.setdefault("SLUICE_DEBUG", "0")
os.environ.setdefault("SLUICE_LOG_LEVEL", "WARNING")


def django_setup() -> None:
    import django
    from django.core.management import call_command

    if "DATABASE_URL" not in os.environ or "REDIS_URL" not in os.environ:
        sys.exit("Set DATABASE_URL and REDIS_URL (a Redis database the benchmark may flush).")
    django.setup()
    call_command("migrate", verbosity=0)


def org_seed():
    from orgs.models import Organization, OrgStatus

    tag = uuid.uuid4().hex[:8]
    return Organization.objects.create(name=f"Bench {tag}", slug=f"bench-{tag}",
                                       status=OrgStatus.ACTIVE)


def tenant_seed(*, capacity_tps=2_000_000_000, guaranteed_tps=1_000_000_000,
                burst_tps=1_000_000_000,
                daily_tokens=10**13, max_concurrency=10**6, pool_policy="fail_closed"):
    """A fresh pool, active org, allocation, API key and gateway token; Redis synced."""
    from orgs.services.api_keys import api_key_create
    from quotas.hook.gateway_tokens import gateway_token_create
    from quotas.models import Allocation, CapacityPool
    from quotas.publish import limiter_sync_pool

    tag = uuid.uuid4().hex[:8]
    org = org_seed()
    pool = CapacityPool.objects.create(model=f"bench-{tag}", region="local",
                                       capacity_tps=capacity_tps,
                                       limiter_failure_policy=pool_policy)
    allocation = Allocation.objects.create(org=org, pool=pool, guaranteed_tps=guaranteed_tps,
                                           burst_tps=burst_tps, daily_tokens=daily_tokens,
                                           max_concurrency=max_concurrency)
    _, api_key = api_key_create(org=org, name="bench", actor="bench")
    _, gateway = gateway_token_create(name=f"bench-{tag}", actor="bench")
    limiter_sync_pool(pool_id=pool.pk)
    return pool, org, allocation, api_key, gateway


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# port -> the pid of the server serving it (web_server() yields the port)
SERVER_PIDS: dict[int, int] = {}


def process_tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds used so far by a process and its children (Linux /proc)."""
    children = Path(f"/proc/{pid}/task/{pid}/children")
    pids = [pid, *map(int, children.read_text().split())] if children.exists() else [pid]
    total = 0
    for p in pids:
        with contextlib.suppress(FileNotFoundError):
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def web_server(*, workers: int, threads: int = 8, env: dict | None = None):
    """The production server (config/serve.py: uvicorn, the hook on the event loop, bodies
    read before a thread runs a request; DEBUG off), with the benchmark endpoints
    (bench/asgi_ceiling.py)."""
    port = free_port()
    metrics_dir = tempfile.mkdtemp(prefix="sluice-metrics-")
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": metrics_dir,
           "SLUICE_WEB_CONCURRENCY": str(workers), "SLUICE_WEB_THREADS": str(threads),
           **(env or {})}
    command = [sys.executable, "-m", "config.serve", "--bind", f"127.0.0.1:{port}",
               "--app", "bench.asgi_ceiling:application"]
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    SERVER_PIDS[port] = process.pid
    try:
        _wait_ready(port)
        yield port
    finally:
        process.terminate()
        process.wait()


def _wait_ready(port: int) -> None:
    import httpx

    for _ in range(300):
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                return
        time.sleep(0.05)
    raise RuntimeError("the web server did not start")


def http_wait(url: str, *, seconds: float, process: subprocess.Popen, what: str) -> None:
    """Until `url` answers 200; fails at once if `process` exits first."""
    import httpx

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2).status_code == 200:
                return
        time.sleep(0.25)
    raise RuntimeError(f"{what} did not answer {url} within {seconds:.0f} s")


@contextlib.contextmanager
def process_served(command: list[str], *, env: dict, cwd: str, log: Path, ready_url: str,
                   ready_seconds: float = 90, what: str):
    """`command` started in a process group of its own (output in `log`), yielded once
    `ready_url` answers; then its group is stopped (SIGTERM, SIGKILL after 20 s)."""
    with log.open("wb") as out:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    try:
        http_wait(ready_url, seconds=ready_seconds, process=process, what=what)
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, 15)  # this process's own group (start_new_session)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait()


def percentile(values: list[float], p: float) -> float:
    """The p-th percentile (nearest rank below), 0.0 for no values."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))] if ordered else 0.0


def table(title: str, header: list[str], rows: list[list]) -> None:
    cells = [header] + [[f"{c:,.1f}" if isinstance(c, float) else
                         (f"{c:,}" if isinstance(c, int) else str(c)) for c in row]
                        for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    print(f"\n{title}")
    for n, row in enumerate(cells):
        print("| " + " | ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) + " |")
        if n == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
