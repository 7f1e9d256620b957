"""Benchmark: failing open, the fleet admits an org at most at its guaranteed rate.

    DATABASE_URL=... REDIS_URL=redis://127.0.0.1:6379/14 python bench/fail_open_fleet.py

For 2, 3 and 4 processes: each decides authorize (the hook's logic, in-process) twice while a
private Redis is up, so that its heartbeat has counted the others; the Redis is stopped; then
every process asks authorize for one org of a fail_open pool as fast as it can for --seconds.
Admitted tokens are compared with what the org's guaranteed rate allows over the run: one
bucket of BUCKET_SECONDS at the start plus the rate times the run's duration. A bucket per
process at the full rate would admit N times that: each process divides the rate by the fleet
it counted.
"""

import argparse
import multiprocessing as mp
import tempfile
import time
from pathlib import Path

from common import django_setup, table, tenant_seed

from tests.private_redis import PrivateRedis

GUARANTEED_TPS = 2_000
COST = 100


def _process(index, pool, api_key, rounds, up_done, redis_stopped, seconds, out):
    from quotas.gateway.hook import authorize_handle
    from quotas.gateway.tokens import GatewayIdentity

    gateway = GatewayIdentity(token_id=0, name="bench")

    def ask(request_id):
        return authorize_handle({"request_id": request_id, "api_key": api_key,
                                 "model": pool.model, "input_tokens": COST - 1,
                                 "max_output_tokens": 1}, gateway)

    for n in range(2):
        rounds.wait()
        ask(f"{index}-up{n}")
    up_done.wait()
    redis_stopped.wait()
    admitted = asked = 0
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        asked += 1
        status, body = ask(f"{index}-{asked}")
        if status == 200:
            admitted += body["reserved_tokens"]
    out.put((admitted, asked, time.monotonic() - started))


def _run(processes: int, seconds: float) -> tuple[int, int, float]:
    from quotas.gateway import fail_open
    from quotas.gateway.routing import pool_routes_reload
    from quotas.limiter.connection import limiter_reset
    from quotas.publish import engine_configure_from_settings

    server = PrivateRedis(Path(tempfile.mkdtemp(prefix="sluice-bench-redis-"))).start()
    from django.conf import settings

    settings.LIMITER_REDIS_URL = server.url
    engine_configure_from_settings()
    fail_open.fail_open_reset()
    fail_open.HEARTBEAT_SECONDS = 0  # a heartbeat on every decision: two rounds suffice
    pool, _, _, api_key, _ = tenant_seed(capacity_tps=10 * GUARANTEED_TPS,
                                         guaranteed_tps=GUARANTEED_TPS,
                                         burst_tps=2 * GUARANTEED_TPS, daily_tokens=10**12,
                                         max_concurrency=10**6, pool_policy="fail_open")
    pool_routes_reload()
    fail_open._caller(api_key, pool.pk)  # read before forking: children never touch PostgreSQL
    from django.db import connections

    connections.close_all()
    ctx = mp.get_context("fork")
    rounds, up_done = ctx.Barrier(processes), ctx.Barrier(processes + 1)
    redis_stopped, out = ctx.Event(), ctx.Queue()
    children = [ctx.Process(target=_process, args=(i, pool, api_key, rounds, up_done,
                                                   redis_stopped, seconds, out))
                for i in range(processes)]
    for child in children:
        child.start()
    up_done.wait()
    server.stop()
    limiter_reset()
    redis_stopped.set()
    results = [out.get() for _ in children]
    for child in children:
        child.join()
    return (sum(r[0] for r in results), sum(r[1] for r in results),
            max(r[2] for r in results))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--processes", default="2,3,4")
    args = parser.parse_args()
    django_setup()
    from quotas.limiter.state import BUCKET_SECONDS

    rows = []
    for n in (int(p) for p in args.processes.split(",")):
        admitted, asked, elapsed = _run(n, args.seconds)
        allowed = GUARANTEED_TPS * (BUCKET_SECONDS + elapsed)
        rows.append([n, asked, admitted, int(allowed), f"{admitted / allowed:.3f}",
                     f"{admitted / (GUARANTEED_TPS * elapsed):.2f}"])
    table(f"fail_open with Redis stopped: one org, {GUARANTEED_TPS:,} guaranteed TPS, "
          f"{args.seconds:.0f} s per row, requests of {COST} tokens",
          ["processes", "asked", "admitted tokens", "allowed: rate x (bucket s + run s)",
           "admitted / allowed", "admitted / (rate x run s)"], rows)


if __name__ == "__main__":
    main()
