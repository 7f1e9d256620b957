"""Benchmark: authorize while the engine's Redis hangs (SIGSTOP) for a few seconds.

    DATABASE_URL=... REDIS_URL=redis://127.0.0.1:6379/14 python bench/redis_hang.py

The engine's Redis is a private redis-server (SLUICE_LIMITER_REDIS_URL). The production server
(uvicorn, --workers) takes --rate decisions/s from --connections keep-alive connections (each
paced, closed loop) in a fail_closed pool: --before s healthy, then Redis stopped with SIGSTOP
for --hang s, then resumed (SIGCONT) for --after s. Printed: the latency of the decisions sent
during the hang (a process waits for the first reply's deadline, then answers by the pool's
policy at once until its probe finds Redis answering), the time from SIGCONT to the first
admission, and the refusals sent later than 1 s after SIGCONT or answered before SIGSTOP, while
Redis was healthy (both must be 0).
"""

import argparse
import asyncio
import json
import os
import signal
import tempfile
import time
from pathlib import Path

from common import django_setup, percentile, table, tenant_seed, web_server

from tests.private_redis import PrivateRedis

PATH = "/api/gateway/v1/authorize"


async def _load(port: int, token: str, make_body, args, server_pid: int) -> tuple[list, dict]:
    import httpx

    marks: dict[str, float] = {}
    records: list[tuple[float, float, int]] = []  # (sent at, seconds, status)
    interval = args.connections / args.rate
    start = time.monotonic()
    end = start + args.before + args.hang + args.after

    async def connection(index: int) -> None:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10,
                                     headers={"Authorization": f"Bearer {token}"}) as client:
            n, next_at = 0, start + index * interval / args.connections
            while next_at < end:
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
                sent = time.monotonic()
                r = await client.post(PATH, content=make_body(index, n),
                                      headers={"Content-Type": "application/json"})
                records.append((sent, time.monotonic() - sent, r.status_code))
                n, next_at = n + 1, max(next_at + interval, time.monotonic())

    async def faults() -> None:
        await asyncio.sleep(args.before)
        os.kill(server_pid, signal.SIGSTOP)
        marks["stopped"] = time.monotonic()
        await asyncio.sleep(args.hang)
        os.kill(server_pid, signal.SIGCONT)
        marks["resumed"] = time.monotonic()

    await asyncio.gather(faults(), *(connection(i) for i in range(args.connections)))
    return records, marks


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=float, default=80, help="decisions/s, all connections")
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--before", type=float, default=3)
    parser.add_argument("--hang", type=float, default=3)
    parser.add_argument("--after", type=float, default=3)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    redis = PrivateRedis(Path(tempfile.mkdtemp(prefix="sluice-bench-redis-"))).start()
    os.environ["SLUICE_LIMITER_REDIS_URL"] = redis.url
    try:
        django_setup()
        pool, _, _, api_key, token = tenant_seed()
        rows = []
        for run in range(args.runs):
            tag = f"h{run}-{time.time_ns()}"

            def make_body(index, n, tag=tag):
                return json.dumps({"request_id": f"{tag}-{index}-{n}", "api_key": api_key,
                                   "model": pool.model, "input_tokens": 20,
                                   "max_output_tokens": 30}).encode()

            with web_server(workers=args.workers) as port:
                records, marks = asyncio.run(_load(port, token, make_body, args,
                                                   redis.process.pid))
            stopped, resumed = marks["stopped"], marks["resumed"]
            during = [s for at, s, _ in records if stopped <= at < resumed]
            first_admit = min((at + s for at, s, status in records
                               if at >= resumed and status == 200), default=float("nan"))
            late = sum(1 for at, _, status in records if at >= resumed + 1 and status != 200)
            # Answered before the stop: a decision in flight when Redis stopped waits for it like
            # one sent during the hang, and may be refused by the pool's policy.
            healthy = sum(1 for at, s, status in records if at + s < stopped and status != 200)
            rows.append([run + 1, len(records), len(during), percentile(during, 50) * 1000,
                         percentile(during, 95) * 1000, max(during) * 1000,
                         sum(1 for s in during if s > 0.010),
                         (first_admit - resumed) * 1000, late, healthy])
    finally:
        os.kill(redis.process.pid, signal.SIGCONT)
        redis.stop()
    table(f"authorize, Redis stopped (SIGSTOP) {args.hang:.0f} s under {args.rate:.0f} "
          f"decisions/s ({args.connections} connections, {args.workers} workers, fail_closed)",
          ["run", "decisions", "during hang", "p50 ms", "p95 ms", "max ms", "> 10 ms",
           "SIGCONT -> first admit ms", "refused > 1 s after", "refused while healthy"], rows)


if __name__ == "__main__":
    main()
