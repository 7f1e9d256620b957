"""Rating throughput: how long the pure rating function takes for a month of hourly rows.

    .venv/bin/python bench/billing_rating.py [orgs_pools] [price_versions]

Pure Python, no database: a month for one org is 720 hours x pools rows, so this bounds the CPU
part of a month-to-date view and of the monthly close.
"""

import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from billing.rating import Price, UsageRow, rate_usage, usage_cost_micros  # noqa: E402


def main() -> None:
    pools = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    versions = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    start = datetime(2026, 10, 1, tzinfo=UTC)
    prices = [Price(pool_id=p, effective_from=start + timedelta(days=7 * v), input=5_000_000,
                    output=30_000_000, premium_input=1_000_000 + v, premium_output=6_000_000)
              for p in range(pools) for v in range(versions)]
    rows = [UsageRow(p, start + timedelta(hours=h), 1_000_003 * h, 200_001 * h, 900_000 * h,
                     150_000 * h) for p in range(pools) for h in range(744)]
    runs = 20
    began = time.perf_counter()
    for _ in range(runs):
        lines = rate_usage(usage=rows, prices=prices, discount_bps=500)
    per_month = (time.perf_counter() - began) / runs
    began = time.perf_counter()
    for row in rows:
        usage_cost_micros(usage=[row], prices=prices)
    per_batch = (time.perf_counter() - began) / len(rows)
    print(f"rows={len(rows)} pools={pools} versions/pool={versions} lines={len(lines)}")
    print(f"rate_usage, one org-month: {per_month * 1000:.1f} ms "
          f"({len(rows) / per_month:,.0f} rows/s)")
    print(f"usage_cost_micros, one single-row batch: {per_batch * 1e6:.1f} us")


if __name__ == "__main__":
    main()
