"""Benchmark: the admission queue against today's refusals, through the reference gateway.

    DATABASE_URL=... REDIS_URL=redis://127.0.0.1:6379/4 \\
        python bench/admission_queue.py [--seconds 60]

One run, both modes, one table. Sluice's production server (config/serve.py), the reference
gateway (`python -m gateway`) and the simulated upstream (`python -m gateway.sim`). Per mode a
fresh pool of --capacity output tokens/s (input metered with output) and three orgs with
guarantees 1 : 2 : 5 of 80 % of it, each allowed to burst into the rest. Their buckets are
drained first, so the run measures the steady state, not the 10 s every bucket starts with.

For --seconds, each org offers a third of twice the pool's capacity, open loop (arrivals at a
fixed rate, whatever the answers), through the official `openai` SDK (AsyncOpenAI, its default
two retries after `retry-after-ms`), requests of ~--tokens tokens (max_tokens; the upstream
writes exactly that many):

(a) today: no budget: a refusal is a 429 the SDK retries, then raises;
(b) the queue: the header `queue_threshold: --budget-ms` on every request (the pool allows it).

Per mode: admitted tokens/s / capacity (tokens of completed requests finished from 10 s after
the start to the end of the window, over that time: the buckets hold 10 s of their rates, and
by then every one is empty); requests that finally failed (of which, in (b), `queue_timeout`:
refused after being told "you fit", each listed with what it was told); each org's share of the
admitted tokens over its weight, Jain's fairness index of those; wait p50/p99 of completed
requests (from the first attempt until the last attempt was admitted: the SDK's back-offs and,
in (b), the time queued); how many were admitted after queueing and their time in the queue
(x-sluice-queued-ms); and requests admitted after their budget (x-sluice-queued-ms above it).
"""

import sys
from pathlib import Path

# Its own directory must not be on the path (bench/gateway.py would shadow the `gateway`
# package); `bench` the package is.
_HERE = str(Path(__file__).resolve().parent)
sys.path[:] = [p for p in sys.path if p != _HERE]
sys.path.insert(0, str(Path(_HERE).parent))

import argparse  # noqa: E402
import asyncio  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402

from bench.common import (  # noqa: E402
    ROOT,
    django_setup,
    free_port,
    org_seed,
    percentile,
    process_served,
    table,
    web_server,
)

UPSTREAM_KEY = "sim-bench-upstream"
WEIGHTS = (1, 2, 5)


def pool_seed(capacity: int, budget_ms: int):
    """A pool with a queue and three orgs (guarantees 1 : 2 : 5 of 80 % of its capacity, each
    bursting up to the whole headroom): (pool, [(org, api key), ...])."""
    from orgs.services.api_keys import api_key_create
    from quotas.models import Allocation, CapacityPool
    from quotas.publish import limiter_sync_pool

    tag = uuid.uuid4().hex[:8]
    pool = CapacityPool.objects.create(model=f"bench-queue-{tag}", region="local",
                                       capacity_tps=capacity, queue_max_wait_ms=budget_ms)
    unit = capacity * 0.8 / sum(WEIGHTS)
    orgs = []
    for weight in WEIGHTS:
        org = org_seed()
        guaranteed = round(unit * weight)
        Allocation.objects.create(org=org, pool=pool, guaranteed_tps=guaranteed,
                                  burst_tps=guaranteed + round(capacity * 0.2),
                                  daily_tokens=10**12, max_concurrency=10**6)
        _, key = api_key_create(org=org, name="bench", actor="bench")
        orgs.append((org, key))
    limiter_sync_pool(pool_id=pool.pk)
    return pool, orgs


def drain(pool, orgs, capacity: int) -> None:
    """Spend what the buckets start with (each org's guarantee and burst, the headroom)."""
    from quotas.limiter.engine import limiter_authorize as decide

    def limiter_authorize(**kwargs):  # the engine's decision is a coroutine
        return asyncio.run(decide(**kwargs))

    for _, key in orgs:
        for _ in range(200):
            d = limiter_authorize(pool_id=pool.pk, api_key=key, request_id=uuid.uuid4().hex,
                                  input_tokens=capacity // 2, max_output_tokens=capacity // 2)
            if not d.allowed:
                d = limiter_authorize(pool_id=pool.pk, api_key=key,
                                      request_id=uuid.uuid4().hex, input_tokens=50,
                                      max_output_tokens=50)
                if not d.allowed:
                    break


async def offer(gateway_url: str, model: str, orgs, *, seconds: float, capacity: int,
                tokens: int, budget_ms: int | None) -> dict:
    """Each org offers a third of twice the capacity for `seconds`; what happened to each
    request: {"org": i, "ok": bool, "code": str | None, "tokens": int, "wait_ms": float,
    "queued_ms": int | None, "done": float}."""
    import httpx
    import openai

    per_org = 2 * capacity / 3 / (tokens + 10)  # requests/s; ~10 tokens of prompt
    results: list[dict] = []
    attempts: dict[str, list[float]] = {}  # bench id -> the start of each attempt
    admitted_at: dict[str, tuple[float, int | None]] = {}

    async def on_request(request: httpx.Request) -> None:
        attempts.setdefault(request.headers["x-bench-id"], []).append(time.monotonic())

    async def on_response(response: httpx.Response) -> None:
        if response.status_code == 200:
            queued = response.headers.get("x-sluice-queued-ms")
            admitted_at[response.request.headers["x-bench-id"]] = (
                attempts[response.request.headers["x-bench-id"]][-1],
                int(queued) if queued is not None else None)

    clients = [openai.AsyncOpenAI(
        base_url=gateway_url + "/v1", api_key=key, timeout=120,
        http_client=openai.DefaultAsyncHttpxClient(
            limits=httpx.Limits(max_connections=2000, max_keepalive_connections=500),
            event_hooks={"request": [on_request], "response": [on_response]}))
        for _, key in orgs]
    headers = {} if budget_ms is None else {"queue_threshold": str(budget_ms)}

    async def one(i: int) -> None:
        bench_id = uuid.uuid4().hex
        first = time.monotonic()
        row = {"org": i, "ok": False, "code": None, "tokens": 0, "wait_ms": 0.0,
               "queued_ms": None, "done": 0.0}
        try:
            completion = await clients[i].chat.completions.create(
                model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=tokens,
                extra_headers={**headers, "x-bench-id": bench_id})
            row.update(ok=True, tokens=completion.usage.total_tokens)
        except openai.APIStatusError as exc:
            row["code"] = exc.code or str(exc.status_code)
            told = exc.response.headers
            row["told_eta_ms"] = int(told.get("x-sluice-queue-eta-ms") or -1)
            row["told_queued_ms"] = int(told.get("x-sluice-queued-ms") or -1)
            row["attempts"] = len(attempts.get(bench_id, ()))
        except openai.APIError as exc:
            row["code"] = type(exc).__name__
        row["done"] = time.monotonic()
        if row["ok"] and bench_id in admitted_at:
            started, queued = admitted_at[bench_id]
            row["queued_ms"] = queued
            row["wait_ms"] = (started - first) * 1000 + (queued or 0)
        row["first"] = first
        results.append(row)

    start = time.monotonic()
    tasks = []

    async def arrivals(i: int) -> None:
        n = 0
        while True:
            due = start + n / per_org
            if due - start >= seconds:
                return
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            tasks.append(asyncio.ensure_future(one(i)))
            n += 1

    await asyncio.gather(*(arrivals(i) for i in range(len(orgs))))
    await asyncio.gather(*tasks)
    for client in clients:
        await client.close()
    return {"results": results, "start": start, "end": start + seconds}


def summary(name: str, run: dict, *, capacity: int, budget_ms: int | None) -> list:
    """One row of the table. Admitted tokens and shares are counted over the window from
    BUCKET_SECONDS after the start to the end: by then, under twice the capacity, every bucket
    is empty, so the pool cannot admit more than its capacity times that window (what a
    bucket saves during a stall inside it is capacity of the same window)."""
    from quotas.limiter.state import BUCKET_SECONDS

    results, end = run["results"], run["end"]
    start = run["start"] + BUCKET_SECONDS
    inside = [r for r in results if r["ok"] and start <= r["done"] <= end]
    tokens = sum(r["tokens"] for r in inside)
    by_org = [sum(r["tokens"] for r in inside if r["org"] == i) for i in range(len(WEIGHTS))]
    shares = [t / max(tokens, 1) for t in by_org]
    normalised = [s / w for s, w in zip(shares, WEIGHTS, strict=True)]
    jain = sum(normalised) ** 2 / (len(normalised) * sum(x * x for x in normalised) or 1)
    failed = [r for r in results if not r["ok"]]
    timeouts = sum(1 for r in failed if r["code"] == "queue_timeout")
    waits = [r["wait_ms"] for r in results if r["ok"]]
    queued = [r["queued_ms"] for r in results if r["ok"] and r["queued_ms"] is not None]
    late = sum(1 for r in results if r["ok"] and budget_ms is not None
               and (r["queued_ms"] or 0) > budget_ms)
    codes = {}
    for r in failed:
        codes[r["code"]] = codes.get(r["code"], 0) + 1
    return [name, len(results), f"{tokens / (end - start) / capacity:.3f}",
            f"{len(failed)} ({timeouts})", " : ".join(f"{s:.3f}" for s in shares),
            f"{jain:.3f}", round(percentile(waits, 50)), round(percentile(waits, 99)), len(queued),
            f"{round(percentile(queued, 50)):,} / {round(percentile(queued, 99)):,}", late,
            ", ".join(f"{c} {n}" for c, n in sorted(codes.items())) or "-"]


def promises_broken(name: str, run: dict) -> None:
    """Each request refused queue_timeout after being told it fits: what it was told."""
    broken = [r for r in run["results"] if r["code"] == "queue_timeout"]
    print(f"{name}: {len(broken)} queue_timeout" + "".join(
        f"\n  org {r['org']}: ETA told {r['told_eta_ms']:,} ms, waited {r['told_queued_ms']:,} "
        f"ms, attempt {r['attempts']}" for r in broken))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--capacity", type=int, default=4000, help="output tokens/s")
    parser.add_argument("--tokens", type=int, default=200, help="max_tokens per request")
    parser.add_argument("--budget-ms", type=int, default=10_000)
    parser.add_argument("--sluice-workers", type=int, default=2)
    args = parser.parse_args()
    django_setup()
    from quotas.hook.gateway_tokens import gateway_token_create

    modes = {"(a) today: refusals, SDK retries": None,
             f"(b) queue, budget {args.budget_ms:,} ms": args.budget_ms}
    pools = {name: pool_seed(args.capacity, args.budget_ms) for name in modes}
    _, gateway_token = gateway_token_create(name=f"bench-queue-{uuid.uuid4().hex[:6]}",
                                            actor="bench")
    tmp = Path(tempfile.mkdtemp(prefix="sluice-bench-queue-"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    rows = []
    with contextlib.ExitStack() as stack:
        sluice_port = stack.enter_context(web_server(workers=args.sluice_workers))
        sim_port, gateway_port = free_port(), free_port()
        stack.enter_context(process_served(
            [sys.executable, "-m", "gateway.sim", "--port", str(sim_port), "--rate", "5000",
             "--ttft-ms", "20", "--api-key", UPSTREAM_KEY,
             "--models", ",".join(pool.model for pool, _ in pools.values())],
            env=env, cwd=str(tmp), log=tmp / "sim.log", what="the simulated upstream",
            ready_url=f"http://127.0.0.1:{sim_port}/v1/models"))
        stack.enter_context(process_served(
            [sys.executable, "-m", "gateway", "--port", str(gateway_port), "--workers", "1"],
            env={**env, "SLUICE_URL": f"http://127.0.0.1:{sluice_port}",
                 "SLUICE_GATEWAY_TOKEN": gateway_token,
                 "GATEWAY_UPSTREAM_URL": f"http://127.0.0.1:{sim_port}/v1",
                 "GATEWAY_UPSTREAM_API_KEY": UPSTREAM_KEY,
                 "GATEWAY_SPOOL_PATH": str(tmp / "usage.jsonl")},
            cwd=str(tmp), log=tmp / "gateway.log", what="the gateway",
            ready_url=f"http://127.0.0.1:{gateway_port}/healthz"))
        for name, budget in modes.items():
            pool, orgs = pools[name]
            drain(pool, orgs, args.capacity)
            run = asyncio.run(offer(f"http://127.0.0.1:{gateway_port}", pool.model, orgs,
                                    seconds=args.seconds, capacity=args.capacity,
                                    tokens=args.tokens, budget_ms=budget))
            rows.append(summary(name, run, capacity=args.capacity, budget_ms=budget))
            promises_broken(name, run)
            if os.environ.get("BENCH_DUMP"):
                Path(os.environ["BENCH_DUMP"] + f".{len(rows)}.json").write_text(json.dumps(
                    {**run, "org_ids": [org.pk for org, _ in orgs], "pool": pool.pk}))
    table(f"Three orgs (guarantees 1 : 2 : 5 of 80 % of {args.capacity:,} tokens/s, bursting "
          f"into the rest) offering 2x the pool's capacity for {args.seconds:.0f} s through the "
          "reference gateway and the openai SDK",
          ["mode", "requests", "admitted / capacity after 10 s", "failed (queue_timeout)",
           "shares 1 : 2 : 5", "Jain", "wait p50 ms", "wait p99 ms", "queued",
           "queued p50 / p99 ms", "after budget", "final errors"], rows)


if __name__ == "__main__":
    main()
