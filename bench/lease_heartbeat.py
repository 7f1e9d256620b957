"""The heartbeat's own cost per gateway process and interval (leases, hook contract §1).

    DATABASE_URL=... REDIS_URL=redis://127.0.0.1:6379/4 python bench/lease_heartbeat.py

One gateway process (this one: the asyncio client, `sluice_client.aio`, as the reference
gateway uses it) holds N leases (N real admissions, in the production web server,
config/serve.py) and renews them all, `--rounds` times, one heartbeat after the other. Per
heartbeat (one call per 1,000 leases): the bytes sent and received (the JSON bodies; HTTP
headers add ~200 bytes a call), the gateway process's CPU (building the bodies, the HTTP
calls, reading the answers: this process's CPU time, nothing else runs in it), Sluice's web
CPU (its process tree's, /proc) and the wall time. "% of a core" is the CPU of one heartbeat
over the interval Sluice names (heartbeat_ms: a third of the pool's lease TTL, 2-5 s; 5 s at
the default TTL of 15 s). Redis's share is not measured here (the script's cost per named
lease is the limiter's, `bench/engine.py`).

Then the gateway's progress appends (gateway/leases.py): the CPU and bytes of one tick with N
streams in flight whose progress all changed (the worst case: every stream delivering), and
per second at the default 25 ms interval.
"""

import argparse
import asyncio
import sys
import tempfile
import time
import uuid

from common import (
    ROOT,
    SERVER_PIDS,
    django_setup,
    process_tree_cpu_seconds,
    table,
    tenant_seed,
    web_server,
)

sys.path.insert(0, str(ROOT / "clients" / "python" / "src"))  # this repository's client


async def measure(url: str, gateway_token: str, api_key: str, model: str, n: int,
                  rounds: int) -> list:
    from sluice_client.aio import AsyncSluiceClient


    async with AsyncSluiceClient(url, token=gateway_token, spool_path=f"/tmp/bench-{n}.jsonl",
                                 leases=True, heartbeat_interval=3600,
                                 flush_interval=3600, max_connections=32) as sluice:
        tag = uuid.uuid4().hex[:8]
        grants = []
        for start in range(0, n, 200):  # admitted 200 at a time
            grants += await asyncio.gather(*(
                sluice.authorize(request_id=f"hb-{tag}-{i}", api_key=api_key, model=model,
                                 input_tokens=10, max_output_tokens=1_000)
                for i in range(start, min(n, start + 200))))
        assert all(g.allowed and g.lease for g in grants), grants[0]
        for i, g in enumerate(grants):
            sluice.lease_progress(g.lease.id, 100 + i % 500)
        await sluice.heartbeat()  # warm: connections open, code paths taken
        stats = sluice.leases.stats
        sent, received, calls = (stats["heartbeat_bytes_sent"],
                                 stats["heartbeat_bytes_received"], stats["heartbeat_calls"])
        renewed = stats["renewed"]
        server = SERVER_PIDS[int(url.rsplit(":", 1)[1])]
        web0, cpu0, wall0 = process_tree_cpu_seconds(server), time.process_time(), \
            time.perf_counter()
        for _ in range(rounds):
            for g in grants[::7]:  # progress moves on between two heartbeats
                sluice.lease_progress(g.lease.id, sluice.leases.held_progress(g.lease.id) + 5)
            await sluice.heartbeat()
        wall = (time.perf_counter() - wall0) / rounds
        cpu = (time.process_time() - cpu0) / rounds
        web = (process_tree_cpu_seconds(server) - web0) / rounds
        assert stats["renewed"] - renewed == n * rounds, dict(stats)
        interval = grants[0].lease.heartbeat_ms / 1000
        for g in grants:
            sluice.release(g.lease.id)
        return [n, (stats["heartbeat_calls"] - calls) // rounds,
                (stats["heartbeat_bytes_sent"] - sent) // rounds,
                (stats["heartbeat_bytes_received"] - received) // rounds,
                cpu * 1000, web * 1000, wall * 1000, interval,
                f"{100 * cpu / interval:.3f} / {100 * web / interval:.3f}"]


def progress_tick(n: int, rounds: int, directory: str) -> list:
    sys.path.insert(0, str(ROOT))  # the gateway package, ahead of bench/gateway.py
    from sluice_client import AuthorizeResult
    from sluice_client.aio import AsyncSluiceClient
    from sluice_client.leases import Lease

    from gateway.app import Gateway
    from gateway.attempt import Attempt
    from gateway.config import GatewayConfig, Upstream
    from gateway.leases import GatewayLeases

    gw = Gateway(GatewayConfig(sluice_url="http://127.0.0.1:9", gateway_token="gw_bench",
                               upstreams={"*": Upstream("http://127.0.0.1:9/v1")}))

    async def run() -> list:
        gw.sluice = AsyncSluiceClient("http://127.0.0.1:9", token="gw_bench", leases=True,
                                      spool_path=f"{directory}/usage-{n}.jsonl")
        leases = GatewayLeases(gw, interval=3600)
        leases.start(f"{directory}/usage-{n}.jsonl")
        attempts = []
        for i in range(n):
            attempt = Attempt(operation="chat", model="m", input_estimate=100)
            attempt.grant = AuthorizeResult(allowed=True, status_code=200,
                                            reservation_id=f"rsv_{i}",
                                            lease=Lease(f"rsv_{i}", 15_000, 5_000))
            gw.sluice.leases.hold(attempt.grant.lease)
            gw.in_flight[attempt.request_id] = attempt
            leases.admitted(attempt)
            attempts.append(attempt)
        leases.tick()
        size0, cpu0 = leases.log.size, time.process_time()
        for r in range(rounds):
            for attempt in attempts:
                attempt.delivered_tokens = 19 * (r + 1)  # 25 ms at 750 tok/s
            leases.tick()
        cpu = (time.process_time() - cpu0) / rounds
        # Bytes appended (a rewrite past 4 MiB resets the size: count from lines instead).
        line = len(b'{"p":"%s","o":%d,"t":%.3f}\n' % (attempts[0].request_id.encode(), 370,
                                                       time.time()))
        del size0
        await leases.stop()
        leases.close()
        return [n, cpu * 1e6, n * line, cpu * 40 * 1000, n * line * 40 // 1024]

    return asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--leases", default="1,10,100,1000,5000")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    django_setup()
    _pool, _org, _allocation, api_key, gateway = tenant_seed()
    rows = []
    with web_server(workers=args.workers) as port:
        url = f"http://127.0.0.1:{port}"
        for n in map(int, args.leases.split(",")):
            rows.append(asyncio.run(measure(url, gateway, api_key, _pool.model, n,
                                            args.rounds)))
    table(f"One heartbeat of one gateway process ({args.rounds} rounds each)",
          ["leases", "calls", "bytes sent", "bytes received", "gateway CPU ms",
           "Sluice web CPU ms", "wall ms", "interval s", "% of a core: gateway / Sluice"],
          rows)
    with tempfile.TemporaryDirectory() as directory:
        ticks = [progress_tick(n, args.rounds, directory)
                 for n in map(int, args.leases.split(","))]
    table("Progress appends of one gateway process, every stream's progress changed",
          ["streams", "CPU µs per tick", "bytes per tick", "CPU ms per s (40 ticks)",
           "KiB per s"], ticks)


if __name__ == "__main__":
    main()
