"""Benchmark 5: the admission model on realistic traffic, on a simulated clock.

    DATABASE_URL=... REDIS_URL=redis://127.0.0.1:6379/4 python bench/model.py

One org, 12,000 output tokens/s guaranteed (its bucket holds 120,000 tokens) in a pool that
meters input apart (400-token prompts), agents sending max_tokens 32,000 and getting ~500
tokens back (log-normal, median 480, 1 in 20 above ~800) after a first token at 1 s (`--ttft`),
streamed at 750 tokens/s, 64 at a time; a refused request waits its retry-after. The real
engine (Redis, authorize.lua, settle.lua) decides, on a simulated clock so the figures do not
depend on the machine: each completed request is settled with what it used.

- "max_tokens": what authorize reserved before estimates (the pool's estimate floor set to
  32,000 makes every request reserve its max_tokens);
- "estimates": the pool's defaults (an estimate of 4,096 until the org has 20 completed
  requests, then the p95 of its recent outputs).

Reported: requests admitted per second, output tokens settled per second against the
allocation, and the most the settled output ran ahead of the allocation (its bucket included)
compared with the largest single overshoot. Then requests of 100,000 input and 500 output
tokens in a pool that meters input apart: they wait for prefill, not decode.
"""

import argparse
import asyncio
import math
import random
from datetime import timedelta

from common import django_setup, org_seed, table

STREAM_TPS = 750  # output tokens/s one stream delivers
OUTPUT_TPS = 12_000
INPUT_TOKENS = 400
PREFILL_TPS, INPUT_TPS = 1_200_000, 200_000
FIRST_WINDOW = 10  # s: the start of saturation


def _tenant(*, estimate_floor: int, prefill: int | None = None, input_tps: int | None = None):
    from orgs.services.api_keys import api_key_create
    from quotas.models import Allocation, CapacityPool
    from quotas.publish import limiter_sync_pool

    org = org_seed()
    pool = CapacityPool.objects.create(
        model=f"model-bench-{org.pk}", region="local", capacity_tps=OUTPUT_TPS * 2,
        prefill_capacity_tps=prefill, output_estimate_floor=estimate_floor)
    Allocation.objects.create(org=org, pool=pool, guaranteed_tps=OUTPUT_TPS,
                              burst_tps=OUTPUT_TPS, guaranteed_input_tps=input_tps,
                              burst_input_tps=input_tps, daily_tokens=10**13,
                              max_concurrency=10**6)
    _, api_key = api_key_create(org=org, name="bench", actor="bench")
    limiter_sync_pool(pool_id=pool.pk)
    return pool, org, api_key


def _simulate(pool, org, api_key, *, seconds: float, streams: int, input_tokens: int,
              output_of, max_output_tokens: int, rng: random.Random, ttft: float) -> dict:
    """Event loop on the frozen limiter clock: each stream asks, waits its retry-after when
    refused, streams its output at STREAM_TPS when admitted, then reports it."""
    from quotas.limiter.clock import clock
    from quotas.limiter.engine import limiter_authorize, limiter_settle
    from quotas.limiter.schema import Settlement

    runner = asyncio.Runner()  # the engine's decision is a coroutine: one loop for the run
    start = clock.now()
    ready = [0.0] * streams  # when each stream next acts (s)
    running: dict[int, tuple[float, str, int, int]] = {}  # stream -> (ends, id, output, reserved)
    admitted = refused = settled_output = n = first_window = 0
    ahead, worst_overshoot, overshoots = 0.0, 0, 0
    while True:
        stream = min(range(streams), key=lambda s: ready[s])
        at = ready[stream]
        if at >= seconds:
            break
        clock.freeze(start + timedelta(seconds=at))
        if stream in running:
            _, rid, output, reserved = running.pop(stream)
            limiter_settle(pool_id=pool.pk, settlements=[Settlement(
                request_id=rid, org_id=org.pk, input_tokens=input_tokens,
                output_tokens=output, completed=1)])
            settled_output += output
            worst_overshoot = max(worst_overshoot, output - reserved)
            overshoots += output > reserved
            # The most the output settled so far ran ahead of what the allocation allows by
            # now, its bucket included.
            ahead = max(ahead, settled_output - OUTPUT_TPS * (10 + at))
            ready[stream] = at
            continue
        n += 1
        rid = f"m{pool.pk}-{n}"
        d = runner.run(limiter_authorize(pool_id=pool.pk, api_key=api_key, request_id=rid,
                                         input_tokens=input_tokens,
                                         max_output_tokens=max_output_tokens))
        if d.outcome == "allowed":
            admitted += 1
            first_window += at < FIRST_WINDOW
            output = output_of(rng)
            ends = at + ttft + output / STREAM_TPS
            running[stream] = (ends, rid, output, d.reserved_output_tokens)
            ready[stream] = ends
        else:
            refused += 1
            ready[stream] = at + max(d.retry_after_ms or 1000, 1) / 1000
    clock.freeze(start + timedelta(seconds=seconds))
    return {"admitted": admitted, "first_window": first_window, "refused": refused,
            "settled_output": settled_output,
            "ahead": ahead, "worst_overshoot": worst_overshoot, "overshoots": overshoots}


def _output(rng: random.Random) -> int:
    return max(1, int(rng.lognormvariate(math.log(480), 0.3)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--ttft", type=float, default=1.0, help="time to first token, s")
    args = parser.parse_args()
    django_setup()
    from quotas.limiter.clock import clock

    rows, rates = [], {}
    for name, floor in (("max_tokens (before)", 32_000), ("estimates", 64)):
        pool, org, api_key = _tenant(estimate_floor=floor, prefill=PREFILL_TPS,
                                     input_tps=INPUT_TPS)
        r = _simulate(pool, org, api_key, seconds=args.seconds, streams=args.streams,
                      input_tokens=INPUT_TOKENS, output_of=_output, max_output_tokens=32_000,
                      rng=random.Random(7), ttft=args.ttft)
        clock.unfreeze()
        rates[name] = (r["first_window"] / FIRST_WINDOW, r["admitted"] / args.seconds)
        rows.append([name, f"{rates[name][0]:,.1f}", f"{rates[name][1]:,.1f}",
                     f"{r['settled_output'] / args.seconds:,.0f}", f"{OUTPUT_TPS:,}",
                     f"{r['ahead']:,.0f}", f"{r['worst_overshoot']:,}", r["overshoots"]])
    table(f"one org, {OUTPUT_TPS:,} output tokens/s, max_tokens 32,000, outputs ~480 tokens, "
          f"first token at {args.ttft:g} s, {args.streams} streams, {args.seconds:.0f} "
          "simulated s",
          ["reserving", f"admitted/s, first {FIRST_WINDOW} s", "admitted/s, whole run",
           "output settled/s", "allocation/s", "most ahead of allocation",
           "largest overshoot", "overshoots"], rows)
    before, after = rates["max_tokens (before)"], rates["estimates"]
    print(f"\nestimates admit {after[0] / before[0]:.1f}x the requests per second in the first "
          f"{FIRST_WINDOW} s of saturation and {after[1] / before[1]:.1f}x over the run (with "
          "refunds at settle, reserving max_tokens admits one request per completion plus "
          "what the refill adds, so it ramps up slowly). Settled output never ran ahead of "
          "the allocation (its bucket included) by more than the overshoot of the requests "
          "in flight.")

    long_rows = []
    for name, prefill, input_tps in (("input metered with output", None, None),
                                     ("input metered apart (200k input tokens/s)", PREFILL_TPS,
                                      INPUT_TPS)):
        pool, org, api_key = _tenant(estimate_floor=64, prefill=prefill, input_tps=input_tps)
        r = _simulate(pool, org, api_key, seconds=args.seconds / 2, streams=args.streams,
                      input_tokens=100_000, output_of=lambda rng: 500,
                      max_output_tokens=32_000, rng=random.Random(7), ttft=args.ttft)
        clock.unfreeze()
        seconds = args.seconds / 2
        long_rows.append([name, f"{r['admitted'] / seconds:,.2f}",
                          f"{r['admitted'] * 100_000 / seconds:,.0f}",
                          f"{r['settled_output'] / seconds:,.0f}"])
    table("100k-input / 500-output requests: prefill, not decode, is what they use",
          ["pool", "admitted/s", "input tokens/s", "output tokens/s"], long_rows)


if __name__ == "__main__":
    main()
