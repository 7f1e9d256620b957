"""Benchmark 4: accuracy under contention.

    DATABASE_URL=... REDIS_URL=redis://127.0.0.1:6379/4 python bench/accuracy.py

4 processes saturate one org for 10 s through the engine (no settlement: every reserved token
counts). The pool (capacity 2,000 TPS) also guarantees 800 TPS to a second org, so the first
org (800 guaranteed, burst to 1,600) can borrow only the 400 TPS of unguaranteed headroom.
What the allocation allows over the run's T seconds, with BUCKET_SECONDS (W) of buffer:

    guaranteed  800 x (W + T)  +  borrowed  min(800 x (W + T), 400 x (W + T))

Admitted tokens must not exceed it and should reach >= 98% of it. The pool as a whole must stay
within its capacity: 2,000 x (W + T).
"""

import argparse
import multiprocessing as mp
import time

from common import django_setup, org_seed, table, tenant_seed

COST = 20  # tokens per request (10 in + 10 out)


def _hammer(pool_id, api_key, index, start, seconds, queue):
    import django

    django.setup()
    from quotas.limiter.connection import LimiterUnavailable
    from quotas.limiter.engine import limiter_authorize

    admitted = requests = unavailable = 0
    while time.time() < start:
        time.sleep(0.0005)
    while time.time() < start + seconds:
        requests += 1
        try:
            d = limiter_authorize(pool_id=pool_id, api_key=api_key,
                                  request_id=f"a{index}-{requests}",
                                  input_tokens=COST // 2, max_output_tokens=COST // 2)
        except LimiterUnavailable:  # a reply slower than the reply timeout (250 ms)
            unavailable += 1
            continue
        admitted += d.reserved_tokens if d.outcome == "allowed" else 0
    queue.put((requests, admitted, unavailable))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--processes", type=int, default=4)
    args = parser.parse_args()
    django_setup()
    from quotas.limiter.state import BUCKET_SECONDS
    from quotas.models import Allocation
    from quotas.publish import limiter_sync_pool

    pool, org, allocation, api_key, _ = tenant_seed(
        capacity_tps=2000, guaranteed_tps=800, burst_tps=1600, daily_tokens=10**12,
        max_concurrency=10**6)
    Allocation.objects.create(org=org_seed(), pool=pool, guaranteed_tps=800, burst_tps=800,
                              daily_tokens=10**9, max_concurrency=10)
    limiter_sync_pool(pool_id=pool.pk)

    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    start = time.time() + 1.0
    procs = [ctx.Process(target=_hammer, args=(pool.pk, api_key, i, start, args.seconds, queue))
             for i in range(args.processes)]
    for p in procs:
        p.start()
    results = [queue.get() for _ in procs]
    for p in procs:
        p.join()
    requests = sum(r[0] for r in results)
    admitted = sum(r[1] for r in results)
    unavailable = sum(r[2] for r in results)
    span = BUCKET_SECONDS + args.seconds
    allowed = 800 * span + min(800 * span, (2000 - 1600) * span)
    pool_bound = 2000 * span
    table(f"accuracy: {args.processes} processes saturate one org for {args.seconds:.0f} s "
          f"({requests:,} decisions, {requests / args.seconds:,.0f}/s, "
          f"{unavailable} timed out)",
          ["measure", "tokens", "share"],
          [["allowed by the allocation (guaranteed + borrowable headroom)", allowed, "100.0%"],
           ["admitted", admitted, f"{admitted / allowed * 100:.2f}%"],
           ["pool capacity over the same span", pool_bound,
            f"admitted = {admitted / pool_bound * 100:.1f}%"]])
    verdict = "OK" if 0.98 * allowed <= admitted <= allowed else "FAIL"
    print(f"\n{verdict}: admitted is {'within' if admitted <= allowed else 'OVER'} the "
          f"allocation and reaches {admitted / allowed * 100:.2f}% of it")


if __name__ == "__main__":
    main()
