"""Benchmark: the reference gateway against its upstream, direct vs through the gateway.

    DATABASE_URL=... REDIS_URL=redis://127.0.0.1:6379/4 python bench/gateway.py

Starts Sluice (the production server, 2 workers), the simulated upstream (gateway/sim: 750
tok/s, 20 ms to the first token) and the gateway (one uvicorn process), each its own process,
then measures from one asyncio load process (httpx, keep-alive), which shares the 2 cores:
(a) small non-streaming completions (max_tokens 8) from `--concurrency` connections for
    `--seconds`: requests/s, p50/p99 latency, and what the gateway adds;
(b) `--streams` concurrent streams of `--stream-tokens` tokens: time to first token and
    delivered tokens/s per stream (tokens after the first / time after the first), p50/p99.
Every gateway request is admitted by Sluice (authorize) and reported (usage, in batches).
A LiteLLM column is not included (not a dependency of this repository).
"""

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time

import httpx
from common import ROOT, django_setup, free_port, table, tenant_seed, web_server

BODY = {"messages": [{"role": "user", "content": "Say something short."}]}


def _process(argv: list[str], env: dict, port: int) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, *argv, "--port", str(port)], cwd=ROOT,
                               env={**os.environ, **env}, stdout=subprocess.DEVNULL)
    for _ in range(600):
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/models").status_code in (200, 401):
                return process
        except httpx.TransportError:
            time.sleep(0.05)
    process.terminate()
    raise RuntimeError(f"{argv} did not start")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def small_completions(url: str, key: str, model: str, *, concurrency: int,
                            seconds: float) -> tuple[float, list[float], int]:
    latencies: list[float] = []
    errors = 0
    body = {**BODY, "model": model, "max_tokens": 8}
    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=30,
                                 headers={"authorization": f"Bearer {key}"}) as client:
        end = time.perf_counter() + seconds

        async def worker():
            nonlocal errors
            while time.perf_counter() < end:
                started = time.perf_counter()
                response = await client.post(url + "/chat/completions", json=body)
                if response.status_code == 200:
                    latencies.append(time.perf_counter() - started)
                else:
                    errors += 1

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return len(latencies) / (time.perf_counter() - started), latencies, errors


async def streams(url: str, key: str, model: str, *, count: int,
                  tokens: int) -> tuple[list[float], list[float], int]:
    ttfts: list[float] = []
    rates: list[float] = []
    errors = 0
    body = {**BODY, "model": model, "max_tokens": tokens, "stream": True}
    limits = httpx.Limits(max_connections=count)
    async with httpx.AsyncClient(limits=limits, timeout=60,
                                 headers={"authorization": f"Bearer {key}"}) as client:
        async def one():
            nonlocal errors
            started = time.perf_counter()
            first = None
            got = 0
            async with client.stream("POST", url + "/chat/completions", json=body) as response:
                if response.status_code != 200:
                    errors += 1
                    await response.aread()
                    return
                async for data in response.aiter_bytes():
                    n = data.count(b'"content":"') - data.count(b'"content":""')
                    if n and first is None:
                        first = time.perf_counter()
                    got += n
            finished = time.perf_counter()
            if first is None or got < tokens:
                errors += 1
                return
            ttfts.append(first - started)
            rates.append((got - 1) / (finished - first) if finished > first else float("inf"))

        await asyncio.gather(*(one() for _ in range(count)))
    return ttfts, rates, errors


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--stream-tokens", type=int, default=750)
    parser.add_argument("--rate", type=float, default=750)
    args = parser.parse_args()
    django_setup()
    pool, _, _, api_key, token = tenant_seed()
    sim_port, gateway_port = free_port(), free_port()
    with web_server(workers=2) as sluice_port:
        sim = _process(["-m", "gateway.sim", "--models", pool.model, "--rate", str(args.rate)],
                       {}, sim_port)
        gateway = _process(["-m", "gateway"], {
            "SLUICE_URL": f"http://127.0.0.1:{sluice_port}", "SLUICE_GATEWAY_TOKEN": token,
            "GATEWAY_UPSTREAM_URL": f"http://127.0.0.1:{sim_port}/v1",
            "GATEWAY_SPOOL_PATH": f"/tmp/sluice-bench-gateway-{gateway_port}.jsonl"},
            gateway_port)
        targets = {"direct": f"http://127.0.0.1:{sim_port}/v1",
                   "gateway": f"http://127.0.0.1:{gateway_port}/v1"}
        try:
            small, stream = {}, {}
            for name, url in targets.items():
                asyncio.run(small_completions(url, api_key, pool.model, concurrency=2,
                                              seconds=1))  # warm up connections
                small[name] = asyncio.run(small_completions(
                    url, api_key, pool.model, concurrency=args.concurrency,
                    seconds=args.seconds))
                stream[name] = asyncio.run(streams(url, api_key, pool.model,
                                                   count=args.streams,
                                                   tokens=args.stream_tokens))
        finally:
            gateway.terminate()
            sim.terminate()
            gateway.wait()
            sim.wait()
    base = small["direct"][1]
    table(f"(a) non-streaming completions, max_tokens 8, {args.concurrency} connections, "
          f"{args.seconds:.0f} s",
          ["path", "requests/s", "p50 ms", "p99 ms", "added p50 ms", "added p99 ms", "errors"],
          [[name, rps, pct(lat, .5) * 1e3, pct(lat, .99) * 1e3,
            (pct(lat, .5) - pct(base, .5)) * 1e3, (pct(lat, .99) - pct(base, .99)) * 1e3, err]
           for name, (rps, lat, err) in small.items()])
    base_ttft = stream["direct"][0]
    table(f"(b) {args.streams} concurrent streams of {args.stream_tokens} tokens at "
          f"{args.rate:.0f} tok/s",
          ["path", "TTFT p50 ms", "TTFT p99 ms", "added TTFT p50 ms", "tok/s p50",
           "tok/s p1 (slowest)", "failed"],
          [[name, pct(ttft, .5) * 1e3, pct(ttft, .99) * 1e3,
            (pct(ttft, .5) - pct(base_ttft, .5)) * 1e3, statistics.median(rates or [0]),
            pct(rates, .01), err]
           for name, (ttft, rates, err) in stream.items()])


if __name__ == "__main__":
    main()
