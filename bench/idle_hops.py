"""Benchmark: what a round trip costs when the processes on its path were idle.

    DATABASE_URL=... REDIS_URL=redis://127.0.0.1:6379/4 python bench/idle_hops.py

One client asks, one at a time, with a pause of --gaps milliseconds between a reply and the
next question: Redis's PING (one hop there and back), and Sluice's authorize on the
production server (the client, a Sluice worker, Redis, the worker, the client). With no pause
every process on the path was just running; after a pause of a few milliseconds each one has
gone to sleep and must be woken, and on some VMs (a Firecracker guest whose idle vCPU halts,
`haltpoll.guest_halt_poll_ns=0`) that costs far more than the work itself.

This is the floor under the gateway's light-load latency (`bench/gateway.py`, 4 connections:
a request every ~8 ms, so every hop starts idle): the gateway adds authorize's round trip,
one more process woken on each of its hops. Compare within one run; machines differ most here.
"""

import argparse
import asyncio
import json
import sys
import time
import uuid
from pathlib import Path

import redis
from common import django_setup, percentile, table, tenant_seed, web_server

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "clients/python/src"))
from sluice_client.http1 import Http1Pool  # noqa: E402

PATH = "/api/gateway/v1/authorize"
WARM = 100


def redis_pings(url: str, gap: float, count: int) -> list[float]:
    client = redis.Redis.from_url(url)
    client.ping()
    took = []
    for _ in range(count):
        started = time.perf_counter()
        client.ping()
        took.append(time.perf_counter() - started)
        if gap:
            time.sleep(gap)
    client.close()
    return took


async def authorizes(port: int, gap: float, count: int, *, token: str, api_key: str,
                     model: str) -> list[float]:
    pool = Http1Pool(f"http://127.0.0.1:{port}")
    headers = {"authorization": f"Bearer {token}", "content-type": "application/json"}
    took = []
    for _ in range(count + WARM):  # the first WARM warm the connection and the worker
        body = json.dumps({"request_id": uuid.uuid4().hex, "api_key": api_key, "model": model,
                           "input_tokens": 50, "max_output_tokens": 8}).encode()
        started = time.perf_counter()
        response = await pool.request("POST", PATH, body=body, headers=headers)
        await response.read()
        response.release()
        if response.status != 200:
            raise SystemExit(f"authorize answered {response.status}")
        took.append(time.perf_counter() - started)
        if gap:
            await asyncio.sleep(gap)
    await pool.close()
    return took[WARM:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gaps", default="0,1,5,30", help="pauses between calls, ms")
    parser.add_argument("--count", type=int, default=300, help="calls per row")
    parser.add_argument("--sluice-workers", type=int, default=2)
    args = parser.parse_args()
    django_setup()
    from django.conf import settings

    pool, _, _, api_key, token = tenant_seed()
    gaps = [float(g) for g in args.gaps.split(",")]
    rows = []
    with web_server(workers=args.sluice_workers) as port:
        base = {}
        for what in ("Redis PING", "Sluice authorize"):
            for gap in gaps:
                if what == "Redis PING":
                    took = redis_pings(settings.REDIS_URL, gap / 1000, args.count)
                else:
                    took = asyncio.run(authorizes(port, gap / 1000, args.count, token=token,
                                                  api_key=api_key, model=pool.model))
                p50 = 1000 * percentile(took, 50)
                base.setdefault(what, p50)
                rows.append([what, f"{gap:g}", p50, 1000 * percentile(took, 90),
                             f"{p50 / base[what]:.2f}x"])
    table(f"Round trips, one at a time, {args.count} per row, after a pause (ms)",
          ["path", "pause ms", "p50 µs", "p90 µs", "p50 ÷ no pause"],
          [[r[0], r[1], round(r[2] * 1000), round(r[3] * 1000), r[4]] for r in rows])


if __name__ == "__main__":
    main()
