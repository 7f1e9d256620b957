"""Benchmark 2: the admission engine in-process (Python -> Redis), no HTTP.

    DATABASE_URL=... REDIS_URL=redis://127.0.0.1:6379/4 python bench/engine.py

One connection, one decision at a time (what a web worker does), then pipelined batches
(what one connection can carry), and the script's own time inside Redis.
"""

import argparse
import time

from common import django_setup, table, tenant_seed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args()
    django_setup()
    from quotas.limiter.clock import clock, day_stamp, epoch_ms, month_stamp
    from quotas.limiter.connection import _script, limiter_client, pool_tag
    from quotas.limiter.engine import limiter_authorize
    from sluice.secrets import secret_digest

    pool, _, _, api_key, _ = tenant_seed()
    client = limiter_client()
    before = client.info("commandstats").get("cmdstat_evalsha", {"calls": 0, "usec": 0})

    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < args.seconds:
        limiter_authorize(pool_id=pool.pk, api_key=api_key, request_id=f"s{n}",
                          input_tokens=200, max_output_tokens=300)
        n += 1
    sequential = n / (time.perf_counter() - start)
    after = client.info("commandstats")["cmdstat_evalsha"]
    # The Redis server may be shared: take the difference over this run only.
    in_redis_us = (after["usec"] - before["usec"]) / max(after["calls"] - before["calls"], 1)

    script, tag, digest = _script("authorize"), pool_tag(pool.pk), secret_digest(api_key)
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < args.seconds:
        now = clock.now()
        pipe = client.pipeline(transaction=False)
        for _ in range(args.batch):
            script(keys=[f"{tag}:keys", f"{tag}:res:p{n}", f"{tag}:synced"],
                   args=[digest, f"p{n}", 500, epoch_ms(now), day_stamp(now), month_stamp(now),
                         600_000, "0", 600_000], client=pipe)
            n += 1
        replies = pipe.execute()
        assert all(r[0] == b"allowed" for r in replies), replies[0]
    pipelined = n / (time.perf_counter() - start)

    table(f"admission engine in-process, {args.seconds:.0f} s each",
          ["mode", "decisions/s", "µs per decision"],
          [["one connection, one at a time", sequential, 1e6 / sequential],
           [f"one connection, pipelined x{args.batch}", pipelined, 1e6 / pipelined],
           ["authorize.lua inside Redis (EVALSHA)", 1e6 / in_redis_us, in_redis_us]])


if __name__ == "__main__":
    main()
