"""Benchmark 4: accuracy under contention, from the start of saturation.

    DATABASE_URL=... REDIS_URL=redis://127.0.0.1:6379/4 python bench/accuracy.py

4 processes saturate one org through the HTTP hook (the production server, config/serve.py)
for 10 s, then a fresh org for 30 s (`--via engine`: the engine in-process, no HTTP). Nothing is
settled: every reserved token counts. The pool (capacity 2,000 TPS) also guarantees 800 TPS to
a second org, so the first org (800 guaranteed, burst to 1,600) can borrow only the 400 TPS of
unguaranteed headroom. What the allocation allows over the run's T seconds, with its buckets
holding BUCKET_SECONDS (W) of their rates when it starts:

    guaranteed  800 x (W + T)  +  borrowed  min(800 x (W + T), 400 x (W + T))

Admitted tokens must never exceed it and should reach >= 99.5% of it. The pool as a whole
stays within its capacity, 2,000 x (W + T). Admitted tokens and T are what the engine itself
recorded (see `_admitted`): the org's day counter, and its first to its last admission.
The shortfall a limiter leaves here is at the start: while the org's guaranteed bucket
drains, the pool's headroom bucket sits full and loses its refill, unless (as authorize.lua
does) that refill pays for the requests first.
"""

import argparse
import asyncio
import json
import multiprocessing as mp
import time

import httpx
from common import django_setup, org_seed, table, tenant_seed, web_server

COST = 20  # tokens per request (10 in + 10 out)
THREADS_PER_PROCESS = 4


def _hammer_engine(pool_id, api_key, index, start, seconds, queue):
    import django

    django.setup()
    from quotas.limiter.connection import LimiterUnavailable
    from quotas.limiter.engine import limiter_authorize

    runner = asyncio.Runner()  # the engine's decision is a coroutine: one loop for the run
    requests = unavailable = 0
    while time.time() < start:
        time.sleep(0.0005)
    while time.time() < start + seconds:
        requests += 1
        try:
            runner.run(limiter_authorize(pool_id=pool_id, api_key=api_key,
                                         request_id=f"a{pool_id}-{index}-{requests}",
                                         input_tokens=COST // 2, max_output_tokens=COST // 2))
        except LimiterUnavailable:  # a reply slower than the timeout on a busy machine
            unavailable += 1
    queue.put((requests, unavailable))


def _hammer_http(base, gateway, body, index, start, seconds, queue):
    import threading

    totals = [0, 0]
    lock = threading.Lock()

    def loop(thread: int) -> None:
        requests = unavailable = 0
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {gateway}",
                                                  "Content-Type": "application/json"}) as client:
            # Open the connection (and warm its worker) before the start, reserving nothing.
            warm = json.loads(body.replace("@", f"warm-{index}-{thread}")) | {"dry_run": True}
            client.post("/api/gateway/v1/authorize", json=warm)
            while time.time() < start:
                time.sleep(0.0005)
            while time.time() < start + seconds:
                requests += 1
                payload = body.replace("@", f"{index}-{thread}-{requests}")
                answer = client.post("/api/gateway/v1/authorize", content=payload).json()
                if not answer["allowed"] and answer["error"]["code"] == "limiter_unavailable":
                    unavailable += 1
        with lock:
            totals[0] += requests
            totals[1] += unavailable

    threads = [threading.Thread(target=loop, args=(t,)) for t in range(THREADS_PER_PROCESS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    queue.put(tuple(totals))


def _tenant():
    from quotas.models import Allocation
    from quotas.publish import limiter_sync_pool

    pool, org, _, api_key, gateway = tenant_seed(
        capacity_tps=2000, guaranteed_tps=800, burst_tps=1600, daily_tokens=10**12,
        max_concurrency=10**6)
    Allocation.objects.create(org=org_seed(), pool=pool, guaranteed_tps=800, burst_tps=800,
                              daily_tokens=10**9, max_concurrency=10)
    limiter_sync_pool(pool_id=pool.pk)
    return pool, org, api_key, gateway


def _admitted(pool, org, until_ms: int) -> tuple[int, float, int]:
    """What Redis admitted while the load ran, and over how long, as the engine itself recorded
    it: each admission's time (its reservation's expiry in the org's in-flight set, less the
    TTL) and tokens (its record's cost; nothing is settled, so every reserved token counts,
    including any whose reply timed out at the client), from the first admission to the last
    one decided by `until_ms`, when the load generators stopped sending. The org's buckets start
    full at its first request, so that, not the moment the load generator was told to start,
    is where its allowance starts. A request sent just before the end and decided after it (a
    VM that stalls the server for 100-200 ms as the load processes exit) is left out, and
    counted: with it, the window would take in time when nobody was asking. Also returns how
    many were left out."""
    from quotas.limiter.connection import engine_config, limiter_client
    from quotas.limiter.schema import KEY, RESERVATION, pool_key

    redis = limiter_client(bulk=True)
    ttl_ms = engine_config().reservation_ttl_s * 1000
    decided = [(int(score) - ttl_ms, request_id) for request_id, score in redis.zrange(
        pool_key(pool.pk, KEY.inflight, org.pk), 0, -1, withscores=True)]
    kept = sorted(d for d in decided if d[0] <= until_ms)
    if not kept:
        return 0, 0.0, len(decided)
    with redis.pipeline(transaction=False) as pipe:
        for _, request_id in kept:
            pipe.hget(pool_key(pool.pk, KEY.reservation, request_id), RESERVATION.cost)
        admitted = sum(int(cost) for cost in pipe.execute())
    return admitted, (kept[-1][0] - kept[0][0]) / 1000, len(decided) - len(kept)


def _window(seconds: float, processes: int, via: str, port: int | None) -> list:
    from quotas.hook.routing import pool_routes_reload
    from quotas.limiter.state import BUCKET_SECONDS

    pool, org, api_key, gateway = _tenant()
    pool_routes_reload()
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    start = time.time() + 3
    if via == "http":
        body = json.dumps({"request_id": "@", "api_key": api_key, "model": pool.model,
                           "input_tokens": COST // 2, "max_output_tokens": COST // 2})
        base = f"http://127.0.0.1:{port}"
        args = [(base, gateway, body.replace("@", f"{pool.pk}-@"), i, start, seconds, queue)
                for i in range(processes)]
        target = _hammer_http
    else:
        args = [(pool.pk, api_key, i, start, seconds, queue) for i in range(processes)]
        target = _hammer_engine
    procs = [ctx.Process(target=target, args=a) for a in args]
    for p in procs:
        p.start()
    results = [queue.get() for _ in procs]
    for p in procs:
        p.join()
    requests = sum(r[0] for r in results)
    unavailable = sum(r[1] for r in results)
    admitted, ran, late = _admitted(pool, org, int((start + seconds) * 1000))
    span = BUCKET_SECONDS + ran
    allowed = int(800 * span + min(800 * span, (2000 - 1600) * span))
    return [f"{seconds:.0f} s", f"{ran:.2f} s", f"{requests:,} ({requests / ran:,.0f}/s)",
            unavailable, late, allowed, admitted, f"{admitted / allowed * 100:.2f}%",
            f"{admitted / (2000 * span) * 100:.1f}%"], admitted, allowed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--windows", default="10,30", help="seconds, one fresh org each")
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--via", choices=["http", "engine"], default="http")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args()
    django_setup()
    windows = [float(w) for w in args.windows.split(",")]
    rows, verdicts = [], []

    def run(port=None):
        for seconds in windows:
            row, admitted, allowed = _window(seconds, args.processes, args.via, port)
            rows.append(row)
            verdicts.append((seconds, admitted, allowed))

    if args.via == "http":
        with web_server(workers=args.workers, threads=args.threads) as port:
            run(port)
    else:
        run()
    how = ("through the HTTP hook (uvicorn "
           f"{args.workers}x{args.threads}, {THREADS_PER_PROCESS} connections each)"
           if args.via == "http" else "through the engine in-process")
    table(f"accuracy: {args.processes} processes saturate one org {how}",
          ["window", "ran", "decisions", "timed out", "decided late", "allowed tokens",
           "admitted tokens", "admitted / allowed", "pool used"], rows)
    for seconds, admitted, allowed in verdicts:
        verdict = "OK" if 0.995 * allowed <= admitted <= allowed else "FAIL"
        print(f"{verdict} ({seconds:.0f} s): admitted is "
              f"{'within' if admitted <= allowed else 'OVER'} the allocation and reaches "
              f"{admitted / allowed * 100:.2f}% of it")


if __name__ == "__main__":
    main()
