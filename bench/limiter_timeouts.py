"""Benchmark: a busy but healthy Redis answers every authorize.

    DATABASE_URL=... REDIS_URL=redis://127.0.0.1:6379/14 python bench/limiter_timeouts.py

The engine's Redis here is a private redis-server (SLUICE_LIMITER_REDIS_URL), so that it can be
made busy without disturbing anyone: every 0.5 s another client runs a command that keeps it
busy for --stall-ms (a Lua busy loop: the cost of a KEYS, a FLUSHDB of a big database or a
heavy script from another tenant of a shared Redis). Redis stays healthy: it answers everything,
some replies just wait behind that command. Meanwhile the production server (uvicorn, --workers
x 8 threads) is saturated over HTTP by the Python load generator (2 processes x 32
connections, closed loop) for --seconds; `--burn N` adds N CPU-spinning processes.

The same run is made with the reply timeout at 50 ms, the connect timeout (a slow reply is
then taken for an outage: 503 limiter_unavailable, and three in a row open the breaker), and at
the default 250 ms (SLUICE_REDIS_REPLY_TIMEOUT_MS; connecting
still has 50 ms to tell a Redis that is down). The table counts the answers by status: a healthy
run must have no 503.
"""

import argparse
import json
import multiprocessing as mp
import os
import tempfile
import time
from pathlib import Path

from common import django_setup, table, tenant_seed, web_server

from bench import loadgen
from tests.private_redis import PrivateRedis

# Busy for ARGV[1] ms without touching any key: Redis answers nobody meanwhile.
STALL = """local t = redis.call('TIME'); local stop = t[1] * 1e6 + t[2] + ARGV[1] * 1000
repeat t = redis.call('TIME') until t[1] * 1e6 + t[2] >= stop"""

PATH = "/api/gateway/v1/authorize"


def _spin(stop) -> None:
    while not stop.is_set():
        sum(range(10_000))


def _stall(url: str, stall_ms: int, stop) -> None:
    import redis

    client = redis.Redis.from_url(url)
    while not stop.wait(0.5):
        client.eval(STALL, 0, stall_ms)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--reply-timeouts-ms", default="50,250")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--connections", type=int, default=32, help="per process")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--burn", type=int, default=0, help="CPU-spinning processes")
    parser.add_argument("--stall-ms", type=int, default=80)
    args = parser.parse_args()
    server = PrivateRedis(Path(tempfile.mkdtemp(prefix="sluice-bench-redis-"))).start()
    os.environ["SLUICE_LIMITER_REDIS_URL"] = server.url
    try:
        run(args, server.url)
    finally:
        server.stop()


def run(args, redis_url: str) -> None:
    django_setup()
    pool, _, _, api_key, gateway = tenant_seed()
    head, tail = json.dumps({"request_id": "@", "api_key": api_key, "model": pool.model,
                             "input_tokens": 200, "max_output_tokens": 300}).encode().split(b"@")
    rows = []
    for timeout_ms in (int(t) for t in args.reply_timeouts_ms.split(",")):
        with web_server(workers=args.workers, threads=8,
                        env={"SLUICE_REDIS_REPLY_TIMEOUT_MS": str(timeout_ms)}) as port:
            tag = f"t{timeout_ms}-{time.time_ns()}"

            def body(index, n, tag=tag):
                return head + f"{tag}-{index}-{n}".encode() + tail

            authorize = loadgen.post_factory(PATH, {"Authorization": f"Bearer {gateway}"}, body)
            loadgen.run(host="127.0.0.1", port=port, request_factory=authorize, processes=1,
                        connections=2, seconds=1)  # warm up
            stop = mp.Event()
            burners = [mp.Process(target=_spin, args=(stop,)) for _ in range(args.burn)]
            burners.append(mp.Process(target=_stall, args=(redis_url, args.stall_ms, stop)))
            for b in burners:
                b.start()
            try:
                r = loadgen.run(host="127.0.0.1", port=port, request_factory=authorize,
                                processes=args.processes, connections=args.connections,
                                seconds=args.seconds)
            finally:
                stop.set()
                for b in burners:
                    b.join()
            rows.append([f"{timeout_ms} ms", r.requests, r.rps, r.percentile(50),
                         r.percentile(99), r.statuses.get(200, 0), r.statuses.get(503, 0),
                         sum(n for s, n in r.statuses.items() if s not in (200, 503))])
    table(f"authorize saturated ({args.processes}x{args.connections} connections, "
          f"{args.seconds:.0f} s, {args.workers} workers x 8 threads, {args.burn} "
          f"spinning processes), Redis busy {args.stall_ms} ms every 0.5 s, by reply timeout",
          ["reply timeout", "answers", "req/s", "p50 ms", "p99 ms", "200", "503", "other"],
          rows)


if __name__ == "__main__":
    main()
