"""Soak: minutes of steady authorize + usage through the hook, with the production layout's
Celery workers and beat running and the monthly invoice close sent in the middle.

    DATABASE_URL=... REDIS_URL=redis://127.0.0.1:6379/4 python bench/soak.py [--minutes 10]
        [--rate 200]

Not part of CI. What runs: the production web server (config/serve.py, through bench/common.py)
serving the hook; every `worker-*` line and the `beat` line of the Procfile, as they are (logs
in a temporary directory, named at the end); and a load process that sends authorize at a fixed
rate (open loop: latency counts from the scheduled time, so a stall cannot hide) on up to
`--connections` kept-alive connections, and reports the usage of every admitted request in
batches every 100 ms, as a gateway does. Half-way, `invoices_close_previous_month_task` is sent
to its queue exactly as beat sends it at 00:15 UTC on the 1st; the tenant has a month of hourly
usage last month (and prices), so the close has a real invoice to rate.

Tables: per minute, authorize and usage latency (p50/p99/max) and what was sent; errors by
code (authorize refusals, usage events rejected, HTTP and connection failures, ERROR lines in
the workers' and beat's logs; all expected 0); the invoice close; the Celery tasks that ran;
the RSS and CPU of every process at the start, after the first minute and at the end;
PostgreSQL's and Redis's memory at the same moments; events answered vs stored.

The machine is shared: PostgreSQL's buffers and Redis's used_memory are the whole server's.
"""

import argparse
import asyncio
import contextlib
import math
import multiprocessing as mp
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

from common import (
    ROOT,
    SERVER_PIDS,
    django_setup,
    table,
    tenant_seed,
    web_server,
)

AUTHORIZE = "/api/gateway/v1/authorize"
USAGE = "/api/gateway/v1/usage"
FLUSH_SECONDS = 0.1  # usage batches: what the Python client does, roughly
TIMEOUT_SECONDS = 10
# The server closes a kept-alive connection that waited 75 s for its next request
# (config/serve.py, KEEP_ALIVE_SECONDS); a client must not reuse one that old, as httpx does not.
IDLE_SECONDS = 15


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--rate", type=float, default=200, help="authorize calls per second")
    parser.add_argument("--connections", type=int, default=32,
                        help="most authorize calls in flight (kept-alive connections)")
    parser.add_argument("--workers", type=int, default=2, help="web server processes")
    parser.add_argument("--threads", type=int, default=8, help="threads per web process")
    args = parser.parse_args()
    django_setup()
    from django.db import connections

    tenant = soak_tenant_seed()
    seconds = args.minutes * 60
    with tempfile.TemporaryDirectory(prefix="sluice-soak-") as tmp, \
            web_server(workers=args.workers, threads=args.threads) as port, \
            celery_started(Path(tmp)) as celery:
        print(f"soak: {args.minutes:g} min at {args.rate:g} authorize/s, web on :{port}, "
              f"Celery: {', '.join(celery)}; load average {load_average()}", flush=True)
        processes = {"web": SERVER_PIDS[port], **celery, "soak (this process)": os.getpid()}
        time.sleep(3)  # the workers' first connections and beat's first ticks
        connections.close_all()  # the load process is forked: it must not share them
        results = mp.get_context("fork").Queue()
        started = time.time()
        load = mp.get_context("fork").Process(target=load_run, args=(
            port, tenant, args.rate, seconds, args.connections, results))
        snapshots = {"start": snapshot(processes)}
        load.start()
        close = InvoiceClose(tenant)
        timer_at(started + 60, lambda: snapshots.__setitem__("after 1 min",
                                                            snapshot(processes)))
        timer_at(started + seconds / 2, close.send)
        summary = results.get()
        load.join()
        close.wait(timeout=120)
        snapshots["end"] = snapshot(processes)
        loads = load_average()
        logs = {name: (Path(tmp) / f"{name}.log").read_text(errors="replace")
                for name in celery}
        logs_dir = Path(tempfile.mkdtemp(prefix="sluice-soak-logs-"))
        for name, text in logs.items():
            (logs_dir / f"{name}.log").write_text(text)
    report(args, summary, snapshots, close, logs, tenant, started)
    print(f"\nload average at the end: {loads}; worker and beat logs: {logs_dir}")


# ---- the tenant ---------------------------------------------------------------------------


def soak_tenant_seed() -> dict:
    """A fresh pool, org, key and gateway token (limits far above the rate), prices since the
    start of last month, and last month's usage as hourly rollups: what the close rates."""
    from billing.models import PriceVersion
    from billing.periods import month_before, month_bounds, month_of
    from metering.models import UsageHourly

    pool, org, _, api_key, gateway = tenant_seed()
    key_id = org.api_keys.get().pk
    last_month = month_before(month_of(datetime.now(UTC)))
    start, end = month_bounds(last_month)
    PriceVersion.objects.create(pool=pool, effective_from=start, input_micros_per_mtok=5_000_000,
                                output_micros_per_mtok=30_000_000,
                                premium_input_micros_per_mtok=1_000_000,
                                premium_output_micros_per_mtok=6_000_000, note="soak")
    hours = int((end - start).total_seconds() // 3600)
    UsageHourly.objects.bulk_create(
        UsageHourly(org=org, pool=pool, api_key_id=key_id, hour=start + timedelta(hours=h),
                    requests=36_000, input_tokens=7_200_000, output_tokens=9_000_000,
                    premium_input_tokens=7_200_000, premium_output_tokens=9_000_000,
                    ttft_ms_total=36_000 * 40, ttft_count=36_000,
                    decode_ms_total=36_000 * 400)
        for h in range(hours))
    return {"pool_id": pool.pk, "model": pool.model, "org_id": org.pk, "api_key": api_key,
            "gateway": gateway, "month": last_month, "run": uuid.uuid4().hex[:8]}


# ---- Celery, as the Procfile runs it ------------------------------------------------------


@contextlib.contextmanager
def celery_started(tmp: Path):
    """Every worker-* line and the beat line of the Procfile, each in its own session (so its
    pool processes are stopped with it), run from `tmp` (beat's schedule file goes there)."""
    from honcho.environ import parse_procfile

    lines = parse_procfile((ROOT / "Procfile").read_text()).processes
    wanted = {name: command for name, command in lines.items()
              if name.startswith("worker-") or name == "beat"}
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    started: dict[str, subprocess.Popen] = {}
    try:
        for name, command in wanted.items():
            with open(tmp / f"{name}.log", "wb") as log:
                started[name] = subprocess.Popen(  # noqa: S603 - our own Procfile
                    ["/bin/sh", "-c", f"exec {command}"], cwd=tmp, env=env,
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True)
        _wait_celery_ready(tmp, started)
        yield {name: proc.pid for name, proc in started.items()}
    finally:
        for proc in started.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)  # warm shutdown: running tasks finish
        for proc in started.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _wait_celery_ready(tmp: Path, started: dict[str, subprocess.Popen]) -> None:
    deadline = time.monotonic() + 120
    for name, proc in started.items():
        marker = "beat: Starting" if name == "beat" else " ready."
        while marker not in (tmp / f"{name}.log").read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"{name} did not start:\n{(tmp / f'{name}.log').read_text()[-3000:]}")
            time.sleep(0.2)


# ---- the invoice close --------------------------------------------------------------------


class InvoiceClose:
    """Sends the monthly close task as beat does, then watches for the tenant's invoice."""

    def __init__(self, tenant: dict):
        self.tenant = tenant
        self.sent_at: float | None = None
        self.invoice_seen_at: float | None = None
        self.invoice_total_cents: int | None = None
        self._done = threading.Event()

    def send(self) -> None:
        from billing.tasks import invoices_close_previous_month_task

        self.sent_at = time.time()
        invoices_close_previous_month_task.delay()  # routed to the billing queue, like beat's
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        from django.db import connection

        from billing.models import Invoice

        try:
            while self.sent_at and time.time() - self.sent_at < 300:
                invoice = Invoice.objects.filter(org_id=self.tenant["org_id"],
                                                 period_start=self.tenant["month"]).first()
                if invoice is not None:
                    self.invoice_seen_at, self.invoice_total_cents = (time.time(),
                                                                      invoice.total_cents)
                    return
                time.sleep(0.5)
        finally:
            connection.close()
            self._done.set()

    def wait(self, timeout: float) -> None:
        if self.sent_at is not None:
            self._done.wait(timeout)


def timer_at(when: float, action) -> None:
    timer = threading.Timer(max(0.0, when - time.time()), action)
    timer.daemon = True
    timer.start()


# ---- the load process ---------------------------------------------------------------------


class Connections:
    """Kept-alive HTTP/1.1 connections to the server, at most `size` requests in flight."""

    def __init__(self, port: int, size: int, headers: str):
        self.port, self.headers = port, headers
        self.gate = asyncio.Semaphore(size)
        self.idle: list = []

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        async with self.gate:
            reader = writer = None
            while self.idle and writer is None:
                reader, writer, used = self.idle.pop()
                if time.monotonic() - used > IDLE_SECONDS:
                    writer.close()  # the server may close it at any moment now: never reuse
                    reader = writer = None
            if writer is None:
                reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
            try:
                writer.write(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{self.headers}"
                             f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
                status, payload, close = await asyncio.wait_for(_response(reader),
                                                                TIMEOUT_SECONDS)
            except BaseException:
                writer.close()
                raise
            if close:
                writer.close()
            else:
                self.idle.append((reader, writer, time.monotonic()))
            return status, payload


async def _response(reader) -> tuple[int, bytes, bool]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status, length, close = int(lines[0].split()[1]), 0, False
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"connection":
            close = value.strip().lower() == b"close"
    return status, await reader.readexactly(length), close


def _code(status: int, payload: bytes) -> str:
    import orjson

    try:
        return orjson.loads(payload)["error"]["code"]
    except Exception:
        return f"http_{status}"


class Load:
    """What one run measured, per minute from its start."""

    def __init__(self, tenant: dict, rate: float, seconds: float):
        self.tenant, self.rate, self.seconds = tenant, rate, seconds
        minutes = max(1, math.ceil(seconds / 60))  # what comes after the end counts in the last
        self.authorize_ms: list[list[float]] = [[] for _ in range(minutes)]
        self.usage_ms: list[list[float]] = [[] for _ in range(minutes)]
        self.usage_events = [0] * minutes
        self.errors_by_minute = [0] * minutes
        self.errors: Counter = Counter()
        self.pending: list[bytes] = []
        self.recorded = self.duplicates = 0
        self.late_ms = 0.0  # how far behind its schedule the generator itself started a call

    def error(self, where: str, code: str, at: float, count: int = 1) -> None:
        self.errors[where, code] += count
        self.errors_by_minute[self.minute(at)] += count

    def minute(self, at: float) -> int:
        return min(int((at - self.t0) // 60), len(self.authorize_ms) - 1)

    async def run(self, port: int, connections: int) -> None:
        headers = (f"Authorization: Bearer {self.tenant['gateway']}\r\n"
                   "Content-Type: application/json\r\n")
        self.hook = Connections(port, connections, headers)
        self.reports = Connections(port, 2, headers)
        self.t0 = time.perf_counter() + 0.2
        end = self.t0 + self.seconds
        calls, flusher = set(), asyncio.create_task(self.usage_flusher(end))
        n = 0
        while (slot := self.t0 + n / self.rate) < end:
            if (delay := slot - time.perf_counter()) > 0:
                await asyncio.sleep(delay)
            self.late_ms = max(self.late_ms, (time.perf_counter() - slot) * 1000)
            call = asyncio.create_task(self.authorize(n, slot))
            calls.add(call)
            call.add_done_callback(calls.discard)
            n += 1
        await asyncio.gather(*calls)
        await flusher
        self.sent = n

    async def authorize(self, n: int, slot: float) -> None:
        import orjson

        request_id = f"soak-{self.tenant['run']}-{n}"
        body = orjson.dumps({"request_id": request_id, "api_key": self.tenant["api_key"],
                             "model": self.tenant["model"], "input_tokens": 200,
                             "max_output_tokens": 300})
        try:
            status, payload = await self.hook.post(AUTHORIZE, body)
        except (OSError, asyncio.IncompleteReadError, TimeoutError) as exc:
            self.error("authorize", type(exc).__name__, slot)
            return
        self.authorize_ms[self.minute(slot)].append((time.perf_counter() - slot) * 1000)
        if status != 200:
            self.error("authorize", _code(status, payload), slot)
            return
        now = datetime.now(UTC)
        self.pending.append(orjson.dumps({
            "request_id": request_id, "reservation_id": orjson.loads(payload)["reservation_id"],
            "input_tokens": 200, "output_tokens": 250, "status": "completed",
            "started_at": (now - timedelta(milliseconds=500)).isoformat(),
            "first_token_at": (now - timedelta(milliseconds=460)).isoformat(),
            "finished_at": now.isoformat()}))

    async def usage_flusher(self, end: float) -> None:
        sends = set()
        while time.perf_counter() < end + 1 or self.pending:
            await asyncio.sleep(FLUSH_SECONDS)
            while self.pending:
                batch, self.pending = self.pending[:1000], self.pending[1000:]
                send = asyncio.create_task(self.usage_send(batch))
                sends.add(send)
                send.add_done_callback(sends.discard)
        await asyncio.gather(*sends)

    async def usage_send(self, batch: list[bytes]) -> None:
        import orjson

        began = time.perf_counter()
        body = b'{"events":[' + b",".join(batch) + b"]}"
        try:
            status, payload = await self.reports.post(USAGE, body)
        except (OSError, asyncio.IncompleteReadError, TimeoutError) as exc:
            self.error("usage", type(exc).__name__, began, len(batch))
            return
        minute = self.minute(began)
        self.usage_ms[minute].append((time.perf_counter() - began) * 1000)
        self.usage_events[minute] += len(batch)
        if status != 200:
            self.error("usage", _code(status, payload), began, len(batch))
            return
        answer = orjson.loads(payload)
        self.recorded += answer["recorded"]
        self.duplicates += answer["duplicates"]
        for result in answer["results"]:
            if result["result"] == "rejected":
                self.error("usage", result["error"]["code"], began)

    def summary(self) -> dict:
        return {"authorize_ms": [_percentiles(m) for m in self.authorize_ms],
                "usage_ms": [_percentiles(m) for m in self.usage_ms],
                "usage_events": self.usage_events, "errors": dict(self.errors),
                "errors_by_minute": self.errors_by_minute,
                "sent": self.sent, "recorded": self.recorded, "duplicates": self.duplicates,
                "late_ms": self.late_ms}


def _percentiles(values: list[float]) -> dict:
    ordered = sorted(values)
    if not ordered:
        return {"n": 0, "p50": 0.0, "p99": 0.0, "max": 0.0}
    return {"n": len(ordered), "p50": ordered[len(ordered) // 2],
            "p99": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], "max": ordered[-1]}


def load_run(port, tenant, rate, seconds, connections, results) -> None:
    """The load process (forked): it measures its own RSS and CPU, as it ends before the last
    snapshot is taken."""
    load = Load(tenant, rate, seconds)
    rss = {"start": _rss_mb(os.getpid())}
    timer_at(time.time() + 60, lambda: rss.__setitem__("after 1 min", _rss_mb(os.getpid())))
    asyncio.run(load.run(port, connections))
    rss["end"], rss["cpu"], rss["pid"] = _rss_mb(os.getpid()), _cpu_seconds(os.getpid()), \
        os.getpid()
    results.put({**load.summary(), "rss": rss})


# ---- memory and CPU -----------------------------------------------------------------------


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        with contextlib.suppress(FileNotFoundError):
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += map(int, (task / "children").read_text().split())
    return found


def _rss_mb(pid: int) -> float | None:
    with contextlib.suppress(FileNotFoundError, ProcessLookupError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return None


def _cpu_seconds(pid: int) -> float:
    with contextlib.suppress(FileNotFoundError, ProcessLookupError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return 0.0


def snapshot(processes: dict[str, int]) -> dict:
    """RSS and CPU of every process (each named process and its descendants), PostgreSQL's and
    Redis's memory."""
    rows = {}
    for name, root in processes.items():
        # This process's own children are the servers named apart: it is counted alone.
        tree = [root] if root == os.getpid() else _descendants(root)
        child = f"{name}: {'worker' if name == 'web' else 'pool'}"
        for n, pid in enumerate(tree):
            label = name if n == 0 else child
            rows[pid] = (label, _rss_mb(pid), _cpu_seconds(pid))
    return {"processes": rows, "postgres": postgres_memory(), "redis": redis_memory(),
            "at": time.time()}


def postgres_memory() -> dict:
    from django.db import connection

    figures = {}
    with connection.cursor() as cursor:
        cursor.execute("""
            SELECT pg_database_size(current_database()),
                   (SELECT coalesce(sum(pg_total_relation_size(relid)), 0)
                      FROM pg_partition_tree('quotas_usageevent')),
                   pg_total_relation_size('quotas_usageeventkey'),
                   pg_total_relation_size('quotas_usagehourly'),
                   (SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()),
                   current_setting('shared_buffers')""")
        (size, events, keys, hourly, connections, shared_buffers) = cursor.fetchone()
        figures["database size"] = size
        figures["usage events (all partitions)"] = int(events)  # numeric: a sum
        figures["usage event keys"], figures["hourly rollups"] = keys, hourly
        figures["connections to this database"] = connections
        figures["shared_buffers (setting)"] = shared_buffers
        with contextlib.suppress(Exception), connection.cursor() as buffers:
            buffers.execute("CREATE EXTENSION IF NOT EXISTS pg_buffercache")
            buffers.execute("""
                SELECT count(*) FILTER (WHERE reldatabase = (SELECT oid FROM pg_database
                                                              WHERE datname = current_database())),
                       count(relfilenode), count(*),
                       current_setting('block_size')::int FROM pg_buffercache""")
            ours, used, total, block = buffers.fetchone()
            figures["shared buffers: this database"] = ours * block
            figures["shared buffers: in use (whole server)"] = used * block
            figures["shared buffers: total"] = total * block
    connection.close()  # the timer's thread has a connection of its own
    return figures


def redis_memory() -> dict:
    import redis

    client = redis.Redis.from_url(os.environ["REDIS_URL"])
    try:
        info = client.info("memory")
        return {"used_memory (whole server)": info["used_memory"],
                "used_memory_rss (whole server)": info["used_memory_rss"],
                "keys in this database": client.dbsize()}
    finally:
        client.close()


def load_average() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


# ---- the report ---------------------------------------------------------------------------

TASK_DONE = re.compile(r"Task ([\w.]+)\[[\w-]+\] succeeded in ([\d.]+)s: (.*)$", re.M)


def report(args, summary, snapshots, close, logs, tenant, started) -> None:
    from metering.models import UsageEvent

    close_minute = int(args.minutes * 60 / 2 // 60)
    rows = []
    for m, (auth, usage) in enumerate(zip(summary["authorize_ms"], summary["usage_ms"],
                                          strict=True)):
        if auth["n"] == 0 and usage["n"] == 0:
            continue
        span = max(1.0, min(60.0, args.minutes * 60 - m * 60))  # the last may be partial
        rows.append([m + 1, auth["n"] / span, f"{auth['p50']:.2f}", f"{auth['p99']:.2f}",
                     f"{auth['max']:.1f}", usage["n"], summary["usage_events"][m],
                     f"{usage['p50']:.1f}", f"{usage['p99']:.1f}",
                     summary["errors_by_minute"][m],
                     "invoice close sent" if m == close_minute and close.sent_at else ""])
    table(f"soak: {args.minutes:g} min, authorize at {args.rate:g}/s (open loop, latency from "
          f"the scheduled time), usage batched every {FLUSH_SECONDS * 1000:.0f} ms; web "
          f"{args.workers}x{args.threads}",
          ["minute", "authorize/s", "auth p50 ms", "auth p99 ms", "auth max ms", "usage calls",
           "events", "usage p50 ms", "usage p99 ms", "errors", ""], rows)

    errors = [[where, code, count] for (where, code), count in sorted(summary["errors"].items())]
    for name, text in logs.items():
        lines = [ln for ln in text.splitlines() if re.search(r"\b(ERROR|CRITICAL)\b", ln)
                 or ln.startswith("Traceback")]
        if lines:
            errors.append([name, "ERROR lines in its log", len(lines)])
    table("errors by code (expected: none)", ["where", "code", "count"],
          errors or [["-", "none", 0]])

    stored = UsageEvent.objects.filter(pool_id=tenant["pool_id"]).count()
    table("authorize and usage, totals", ["measure", "value"], [
        ["authorize calls scheduled", summary["sent"]],
        ["usage events recorded (answers)", summary["recorded"]],
        ["usage events duplicate (answers)", summary["duplicates"]],
        ["usage events stored in PostgreSQL", stored],
        ["load generator: most behind its own schedule, ms", f"{summary['late_ms']:.1f}"]])

    done = [(name, float(secs), result) for name, secs, result in TASK_DONE.findall(
        "\n".join(logs.values()))]
    closes = [d for d in done if d[0].endswith("invoices_close_previous_month_task")]
    table("invoice close (billing.tasks.invoices_close_previous_month_task, sent as beat does)",
          ["measure", "value"], [
              ["sent at", f"{close.sent_at - started:.0f} s into the run"
               if close.sent_at else "not sent"],
              ["task ran in (worker's log)", f"{closes[0][1]:.2f} s" if closes else "not seen"],
              ["invoices created (task result)", closes[0][2] if closes else "-"],
              [f"soak org's invoice for {tenant['month']:%Y-%m}",
               f"${close.invoice_total_cents / 100:,.2f}, there "
               f"{close.invoice_seen_at - close.sent_at:.1f} s after sending"
               if close.invoice_seen_at else "not seen"]])

    per_task: dict[str, list[float]] = {}
    for name, secs, _ in done:
        per_task.setdefault(name, []).append(secs)
    table("Celery tasks that ran (workers' logs)", ["task", "runs", "max s"],
          [[name, len(v), f"{max(v):.3f}"] for name, v in sorted(per_task.items())])

    first, last = snapshots["start"], snapshots["end"]
    middle = snapshots.get("after 1 min", first)
    rows = []
    for pid, (label, rss, cpu) in sorted(last["processes"].items(),
                                         key=lambda item: item[1][0]):
        begin = first["processes"].get(pid)
        rows.append([label, pid, _mb(begin[1] if begin else None),
                     _mb(middle["processes"].get(pid, (None, None))[1]), _mb(rss),
                     f"{cpu - (begin[2] if begin else 0):.1f}"])
    own = summary["rss"]
    rows.append(["load generator", own["pid"], _mb(own["start"]), _mb(own.get("after 1 min")),
                 _mb(own["end"]), f"{own['cpu']:.1f}"])
    gone = [pid for pid in first["processes"] if pid not in last["processes"]]
    table("processes: RSS (MB) and CPU used during the run", ["process", "pid", "start",
          "after 1 min", "end", "CPU s"], rows)
    if gone:
        print(f"processes gone by the end (restarted?): {gone}")

    rows = []
    for source in ("postgres", "redis"):
        for name, value in last[source].items():
            rows.append([f"{source}: {name}", _size(first[source].get(name)),
                         _size(middle[source].get(name)), _size(value)])
    table("PostgreSQL and Redis", ["measure", "start", "after 1 min", "end"], rows)


def _mb(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _size(value) -> str:
    if isinstance(value, int) and value >= 1 << 20:
        return f"{value / (1 << 20):,.1f} MB"
    return "-" if value is None else f"{value:,}" if isinstance(value, int) else str(value)


if __name__ == "__main__":
    main()
