"""Benchmark 5: where a usage batch's time goes inside PostgreSQL.

    DATABASE_URL=... REDIS_URL=redis://127.0.0.1:6379/4 python bench/usage_store.py

Runs ingestion's statement (metering/usage.py `_INSERT_SQL`, exactly as a usage call does, with
new events each time) under EXPLAIN (ANALYZE, FORMAT JSON), `--batches` times with `--batch`
events, one committed transaction each, and prints the median time spent writing each table:
the time of each INSERT node less the time of the plans under it (the request ids it claims,
the events it inserts, the rollups it upserts), and the whole transaction with its commit
(where deferred foreign-key checks run). No HTTP, no Python parsing: the database's share of a
usage call, and the cost of the request-id claim the partitioned table needs.
"""

import argparse
import statistics
import time
import uuid
from collections import defaultdict
from datetime import UTC, datetime, timedelta

from common import django_setup, table, tenant_seed


def _exclusive_ms(plan: dict, found: dict[str, list[float]]) -> None:
    children = plan.get("Plans", [])
    if plan.get("Node Type") == "ModifyTable":
        own = plan["Actual Total Time"] - sum(c["Actual Total Time"] * c["Actual Loops"]
                                              for c in children)
        found[plan["Relation Name"]].append(own)
    for child in children:
        _exclusive_ms(child, found)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--batches", type=int, default=60)
    args = parser.parse_args()
    django_setup()
    import psycopg
    from django.db import connection, transaction

    from metering import usage

    pool, org, _, _, _ = tenant_seed()
    key_id = org.api_keys.get().pk
    start = datetime.now(UTC) - timedelta(minutes=1)
    times: dict[str, list[float]] = defaultdict(list)
    totals, transactions = [], []
    for n in range(args.batches):
        tag = uuid.uuid4().hex[:8]
        size = args.batch
        columns = {
            "request_id": [f"store-{tag}-{i}" for i in range(size)], "org_id": [org.pk] * size,
            "pool_id": [pool.pk] * size, "api_key_id": [key_id] * size,
            "status": ["completed"] * size, "input_tokens": [800] * size,
            "output_tokens": [400] * size, "started_at": [start] * size,
            "first_token_at": [start + timedelta(milliseconds=180)] * size,
            "finished_at": [start + timedelta(milliseconds=980)] * size,
            "ttft_ms": [180] * size, "output_tps": [500.0] * size,
            "premium_eligible": [True] * size, "unreserved": [False] * size,
        }
        connection.ensure_connection()
        began = time.perf_counter()
        with transaction.atomic(), psycopg.Cursor(connection.connection) as cursor:
            cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + usage._INSERT_SQL,
                           {**columns, "received_at": datetime.now(UTC)})
            plan = cursor.fetchone()[0][0]
        committed = (time.perf_counter() - began) * 1000
        if n < 5:
            continue  # warm-up: caches, the first partition pages
        totals.append(plan["Execution Time"])
        transactions.append(committed)
        _exclusive_ms(plan["Plan"], times)
    rows = [[relation, statistics.median(ms), 1000 * statistics.median(ms) / args.batch]
            for relation, ms in sorted(times.items())]
    rows.append(["whole statement", statistics.median(totals),
                 1000 * statistics.median(totals) / args.batch])
    rows.append(["transaction, with its commit", statistics.median(transactions),
                 1000 * statistics.median(transactions) / args.batch])
    table(f"usage ingestion inside PostgreSQL: {args.batches - 5} batches of {args.batch} new "
          "events, medians", ["table written", "ms per batch", "µs per event"], rows)


if __name__ == "__main__":
    main()
