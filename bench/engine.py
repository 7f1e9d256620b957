"""Benchmark 2: the admission engine in-process (Python -> Redis), no HTTP.

    DATABASE_URL=... REDIS_URL=redis://127.0.0.1:6379/4 python bench/engine.py

One connection, one decision at a time (what a web worker does), then pipelined batches
(what one connection can carry), and the script's own time inside Redis.
"""

import argparse
import asyncio
import time

from common import django_setup, table, tenant_seed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args()
    django_setup()
    from quotas.limiter.clock import clock, day_stamp, epoch_ms, month_stamp
    from quotas.limiter.connection import _script, limiter_client
    from quotas.limiter.engine import limiter_authorize
    from quotas.limiter.schema import KEY, AuthorizeArgs, AuthorizeKeys, pool_key
    from sluice.secrets import secret_digest

    pool, _, _, api_key, _ = tenant_seed()
    client = limiter_client()

    def evalsha_stats() -> tuple[int, int]:
        stats = client.info("commandstats").get("cmdstat_evalsha", {"calls": 0, "usec": 0})
        return stats["calls"], stats["usec"]

    # The Redis server may be shared, and the machine busy: the script's time is taken per
    # batch of 200 decisions (calls and microseconds Redis counted for this run only), and the
    # median and best batches are reported beside the mean (on a VM, batches of the same run
    # vary 2x: the best is the cost without other load).
    async def decide(first: int, count: int) -> None:  # as a worker's loop does, one by one
        for n in range(first, first + count):
            await limiter_authorize(pool_id=pool.pk, api_key=api_key, request_id=f"s{n}",
                                    input_tokens=200, max_output_tokens=300)

    runner = asyncio.Runner()
    n, start, batches = 0, time.perf_counter(), []
    while time.perf_counter() - start < args.seconds:
        calls, usec = evalsha_stats()
        runner.run(decide(n, 200))
        n += 200
        after_calls, after_usec = evalsha_stats()
        batches.append((after_usec - usec, after_calls - calls))
    sequential = n / (time.perf_counter() - start)
    runner.close()
    in_redis_us = sum(u for u, _ in batches) / max(sum(c for _, c in batches), 1)
    per_batch = sorted(u / max(c, 1) for u, c in batches)
    best_us, median_us = per_batch[0], per_batch[len(per_batch) // 2]

    script, digest = _script("authorize"), secret_digest(api_key)
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < args.seconds:
        now = clock.now()
        pipe = client.pipeline(transaction=False)
        for _ in range(args.batch):
            keys = AuthorizeKeys(registry=pool_key(pool.pk, KEY.registry),
                                 synced=pool_key(pool.pk, KEY.synced),
                                 pool=pool_key(pool.pk, KEY.pool),
                                 reservation=pool_key(pool.pk, KEY.reservation, f"p{n}"))
            script(keys=keys, client=pipe, args=AuthorizeArgs(
                digest=digest, request_id=f"p{n}", input_tokens=200, max_output_tokens=300,
                tier="auto", key_tier="unknown", pool_tier="fast", now_ms=epoch_ms(now),
                day=day_stamp(now), month=month_stamp(now), ttl_ms=600_000, dry_run=0,
                record_ttl_ms=600_000, lease_owner="", lease_id="", lease_for=""))
            n += 1
        replies = pipe.execute()
        assert all(r[0] == "allowed" for r in replies), replies[0]
    pipelined = n / (time.perf_counter() - start)

    table(f"admission engine in-process, {args.seconds:.0f} s each",
          ["mode", "decisions/s", "µs per decision"],
          [["one connection, one at a time", sequential, 1e6 / sequential],
           [f"one connection, pipelined x{args.batch}", pipelined, 1e6 / pipelined],
           ["authorize.lua inside Redis (EVALSHA), mean", 1e6 / in_redis_us, in_redis_us],
           ["authorize.lua inside Redis, median batch of 200", 1e6 / median_us, median_us],
           ["authorize.lua inside Redis, best batch of 200", 1e6 / best_us, best_us]])


if __name__ == "__main__":
    main()
