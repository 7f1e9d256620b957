"""Benchmark 3: usage ingestion over HTTP, durable in PostgreSQL before each answer.

    DATABASE_URL=... REDIS_URL=redis://127.0.0.1:6379/4 python bench/usage_http.py

Batches of 500 events per call, then one event per call. Every event is new (a fresh
request_id with its signed reservation_id), so each one is inserted, rolled up and settled;
"events/s stored" counts the rows in PostgreSQL afterwards.

With wrk (the default when it is on PATH) the bodies are built beforehand in this process
(the reservation_id is an HMAC of the request_id, which wrk's Lua cannot compute cheaply), one
per line of a temporary file, enough for --max-events-per-s for the whole run; wrk's Lua reads
them in turn. Should they run out, it starts over (replays are idempotent, so cheaper) and the
table says so. `--loadgen python` uses the pure-Python generator (bench/loadgen.py) instead.
"""

import argparse
import contextlib
import json
import os
import resource
import tempfile
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from common import (
    SERVER_PIDS,
    django_setup,
    process_tree_cpu_seconds,
    table,
    tenant_seed,
    web_server,
)

from bench import loadgen, wrk

PATH = "/api/gateway/v1/usage"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--threads", type=int, default=8, help="threads per process")
    parser.add_argument("--loadgen", choices=["wrk", "python"],
                        default="wrk" if wrk.available() else "python")
    parser.add_argument("--batch-connections", type=int, default=4, help="wrk")
    parser.add_argument("--single-connections", type=int, default=8, help="wrk")
    parser.add_argument("--max-events-per-s", type=int, default=100_000,
                        help="wrk: batch bodies built for this rate (single: a tenth)")
    args = parser.parse_args()
    django_setup()
    from metering.models import UsageEvent
    from quotas.hook.reservations import reservation_id_issue

    pool, org, _, api_key, gateway = tenant_seed()
    key_id = org.api_keys.get().pk
    start = datetime.now(UTC) - timedelta(minutes=1)
    times = {"started_at": start.isoformat(),
             "first_token_at": (start + timedelta(milliseconds=180)).isoformat(),
             "finished_at": (start + timedelta(milliseconds=980)).isoformat()}

    # Bodies are built from a string template: the load generator shares the machine, so it
    # must not spend more per event than it has to (the signature is the only real work).
    template = json.dumps({"request_id": "@R", "input_tokens": 800, "output_tokens": 400,
                           "status": "completed", **times, "reservation_id": "@S"})
    head, rest = template.split("@R")
    middle, tail = rest.split("@S")

    def event(request_id: str) -> str:
        signed = reservation_id_issue(pool_id=pool.pk, org_id=org.pk, api_key_id=key_id,
                                      request_id=request_id)
        return head + request_id + middle + signed + tail

    def body(size: int, base: str) -> str:
        if size == 1:
            return event(base)
        return '{"events":[' + ",".join(event(f"{base}-{i}") for i in range(size)) + "]}"

    def stored(tag: str) -> int:
        return UsageEvent.objects.filter(pool=pool, request_id__contains=f"-{tag}-").count()

    headers = {"Authorization": f"Bearer {gateway}"}
    rows = []
    redis_keys, redis_memory = _redis().dbsize(), _redis().info("memory")["used_memory"]
    if args.loadgen == "wrk":
        # "w": a short warm-up of every worker (its bodies run out and repeat: that is fine).
        plan = ((args.batch, "w", 2, args.batch / 2),
                (args.batch, "b", args.batch_connections, args.max_events_per_s),
                (1, "s", args.single_connections, args.max_events_per_s // 10))
        script = wrk.post_file_script(PATH, headers)
        with tempfile.TemporaryDirectory(prefix="sluice-usage-") as tmp:
            files = []
            for size, tag, connections, rate in plan:
                count = int(rate * args.seconds / size) + connections
                name = os.path.join(tmp, f"{tag}.jsonl")
                run_tag = uuid.uuid4().hex[:6]
                with open(name, "w") as f:
                    for n in range(count):
                        f.write(body(size, f"u{pool.pk}-{tag}-{run_tag}-{n}") + "\n")
                files.append((name, count))
            with web_server(workers=args.workers, threads=args.threads) as port:
                url = f"http://127.0.0.1:{port}{PATH}"
                for (size, tag, connections, _), (name, count) in zip(plan, files, strict=True):
                    before = cpu_seconds(port)
                    r = wrk.run(url, connections=connections,
                                seconds=2 if tag == "w" else args.seconds,
                                script=script, args=(name, 0, count))
                    if tag == "w":
                        continue
                    spent = [b - a for a, b in zip(before, cpu_seconds(port), strict=True)]
                    note = f"errors: {r.errors}" + (f", REPLAYED x{r.replayed}" if r.replayed
                                                    else "")
                    events = stored(tag)
                    rows.append([f"{size} event(s) per call, {connections} connections",
                                 r.rps, r.rps * size, events / r.seconds,
                                 f"{r.p50_ms:.2f}", f"{r.p99_ms:.2f}",
                                 *(f"{1e6 * c / max(events, 1):.1f}" for c in spent),
                                 f"{2 * events / sum(spent):,.0f}", note])
        title = "usage ingestion over HTTP, wrk -t1 (closed loop): uvicorn " \
                f"{args.workers}x{args.threads}, {args.seconds:.0f} s each"
    else:
        with web_server(workers=args.workers, threads=args.threads) as port:
            for size, tag, connections in ((args.batch, "b", 3), (1, "s", 8)):
                def make(index: int, n: int, size=size, tag=tag) -> bytes:
                    return body(size, f"u{pool.pk}-{tag}-{index}-{n}").encode()

                factory = loadgen.post_factory(PATH, headers, make)
                r = loadgen.run(host="127.0.0.1", port=port, request_factory=factory,
                                processes=2, connections=connections, seconds=args.seconds)
                rows.append([f"{size} event(s) per call, {2 * connections} connections",
                             r.rps, r.rps * size, stored(tag) / args.seconds,
                             r.percentile(50), r.percentile(99),
                             ", ".join(f"{k}: {v}" for k, v in r.statuses.items())])
        title = "usage ingestion over HTTP, Python load generator: uvicorn " \
                f"{args.workers}x{args.threads}, {args.seconds:.0f} s each"
    cpu = ["web CPU µs/event", "PostgreSQL CPU µs/event", "Redis CPU µs/event",
           "wrk CPU µs/event", "2 cores / CPU: events/s"] if args.loadgen == "wrk" else []
    table(title, ["calls", "calls/s", "events/s answered", "events/s stored", "p50 ms",
                  "p99 ms", *cpu, "statuses" if args.loadgen == "python" else "notes"], rows)
    if cpu:
        print("CPU per event stored: the web server's processes, this database's PostgreSQL "
              "backends, the Redis server (lookups and settles; whatever else it serves too) "
              "and wrk (from /proc, INFO cpu and getrusage). The last figure is what two cores "
              "would sustain doing only this: it depends far less than events/s on what else "
              "the machine runs.")
        print(f"Redis at the start: {redis_keys:,} keys in this database, used_memory "
              f"{redis_memory / 2**20:,.1f} MB (a settled event's record stays 6 h 10 min; "
              "millions of them left by earlier runs slow it down)")


def cpu_seconds(port: int) -> tuple[float, float, float]:
    """CPU used so far by the web server (and its workers), by the PostgreSQL backends serving
    this database, by the Redis server (all of it), and by finished child processes (wrk)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                       "AND pid <> pg_backend_pid()")
        backends = [pid for (pid,) in cursor.fetchall()]
    postgres = 0.0
    for pid in backends:
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            postgres += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    redis_cpu = _redis().info("cpu")
    return (process_tree_cpu_seconds(SERVER_PIDS[port]), postgres,
            redis_cpu["used_cpu_sys"] + redis_cpu["used_cpu_user"],
            children.ru_utime + children.ru_stime)


def _redis():
    from quotas.limiter.connection import limiter_client

    return limiter_client(bulk=True)


if __name__ == "__main__":
    main()
