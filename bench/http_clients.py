"""CPU per request of the asyncio HTTP clients a gateway could use, against the simulated
upstream (what bench/gateway.py found the reference gateway spends its CPU on):

    python bench/http_clients.py [--requests 1000] [--concurrency 1,16,64]

httpx.AsyncClient, aiohttp.ClientSession and sluice_client.http1 (what gateway/ and
sluice_client.aio use, for the CPU this measures), all on uvloop as uvicorn runs them, each
with a keep-alive pool of 200 connections, GET /v1/models of `python -m gateway.sim` (started here,
in its own process). CPU time of this process only (time.process_time), so other load on the
machine distorts it less than it distorts throughput.
"""

import argparse
import asyncio
import contextlib
import subprocess
import sys
import time

import aiohttp
import httpx
import uvloop
from common import ROOT, free_port, table

sys.path.insert(0, str(ROOT / "clients" / "python" / "src"))
from sluice_client.http1 import Http1Pool  # noqa: E402


async def _httpx(url: str, requests: int, concurrency: int) -> float:
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
    async with httpx.AsyncClient(limits=limits) as client:
        async def worker():
            for _ in range(requests // concurrency):
                (await client.get(url)).raise_for_status()
        await worker()  # open a connection, warm up
        began = time.process_time()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return 1e6 * (time.process_time() - began) / (requests // concurrency * concurrency)


async def _aiohttp(url: str, requests: int, concurrency: int) -> float:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=200)) as session:
        async def worker():
            for _ in range(requests // concurrency):
                async with session.get(url) as response:
                    response.raise_for_status()
                    await response.read()
        await worker()
        began = time.process_time()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return 1e6 * (time.process_time() - began) / (requests // concurrency * concurrency)


async def _http1(url: str, requests: int, concurrency: int) -> float:
    origin, _, path = url.partition("/v1/")
    pool = Http1Pool(origin, limit=200)

    async def worker():
        for _ in range(requests // concurrency):
            response = await pool.request("GET", "/v1/" + path)
            try:
                assert response.status == 200
                await response.read()
            finally:
                response.release()
    await worker()
    began = time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    used = 1e6 * (time.process_time() - began) / (requests // concurrency * concurrency)
    await pool.close()
    return used


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--concurrency", default="1,16,64")
    args = parser.parse_args()
    port = free_port()
    sim = subprocess.Popen([sys.executable, "-m", "gateway.sim", "--port", str(port)], cwd=ROOT,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}/v1/models"
        for _ in range(200):
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url).status_code == 200:
                    break
            time.sleep(0.1)
        rows = []
        for concurrency in (int(c) for c in args.concurrency.split(",")):
            a = uvloop.run(_httpx(url, args.requests, concurrency))
            b = uvloop.run(_aiohttp(url, args.requests, concurrency))
            c = uvloop.run(_http1(url, args.requests, concurrency))
            rows.append([concurrency, f"{a:,.0f}", f"{b:,.0f}", f"{c:,.0f}", f"{c / b:.2f}"])
        table(f"client CPU µs per request, {args.requests} GETs of the simulated upstream",
              ["concurrency", "httpx", "aiohttp", "sluice_client.http1", "http1 ÷ aiohttp"],
              rows)
    finally:
        sim.terminate()
        sim.wait()


if __name__ == "__main__":
    main()
