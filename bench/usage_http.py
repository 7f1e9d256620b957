"""Benchmark 3: usage ingestion over HTTP, durable in PostgreSQL before each answer.

    DATABASE_URL=... REDIS_URL=redis://127.0.0.1:6379/4 python bench/usage_http.py

Batches of 500 events per call, then one event per call. Every event is new (a fresh
request_id with a signed reservation_id), so each one is inserted, rolled up and settled.
"""

import argparse
import json
from datetime import UTC, datetime, timedelta

from common import django_setup, gunicorn, table, tenant_seed

from bench import loadgen


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args()
    django_setup()
    from quotas.gateway.reservations import reservation_id_issue
    from quotas.models import UsageEvent

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

    def body(size: int, tag: str):
        def make(index: int, n: int) -> bytes:
            base = f"u{pool.pk}-{tag}-{index}-{n}"
            if size == 1:
                return event(base).encode()
            events = ",".join(event(f"{base}-{i}") for i in range(size))
            return ('{"events":[' + events + "]}").encode()
        return make

    headers = {"Authorization": f"Bearer {gateway}"}
    rows = []
    with gunicorn(workers=args.workers, threads=args.threads) as port:
        for size, tag, connections in ((args.batch, "b", 3), (1, "s", 8)):
            factory = loadgen.post_factory("/api/gateway/v1/usage", headers, body(size, tag))
            r = loadgen.run(host="127.0.0.1", port=port, request_factory=factory, processes=2,
                            connections=connections, seconds=args.seconds)
            stored = UsageEvent.objects.filter(pool=pool, request_id__contains=f"-{tag}-").count()
            rows.append([f"{size} event(s) per call, {2 * connections} connections", r.rps,
                         r.rps * size, stored / args.seconds, r.percentile(50),
                         r.percentile(99), ", ".join(f"{k}: {v}" for k, v in r.statuses.items())])
    table(f"usage ingestion over HTTP: gunicorn {args.workers}x{args.threads}, "
          f"{args.seconds:.0f} s each",
          ["calls", "calls/s", "events/s answered", "events/s stored", "p50 ms", "p99 ms",
           "statuses"], rows)


if __name__ == "__main__":
    main()
