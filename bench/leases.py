"""Benchmark: what leases cost the hook's process (docs/hook.md, Leases).

    DATABASE_URL=... REDIS_URL=redis://127.0.0.1:6379/11 python bench/leases.py [--decisions 4000]

1. Authorize's CPU per decision in the hook's process (its Python and the Redis client's, the
   thread's CPU time: Redis's own work is bench/script_instructions.py's), a plain admission
   against a lease, in one run: alternating blocks of 200 of each, so a machine whose speed
   drifts skews both alike; every request_id new, limits high (each decision is an
   admission). The lease's id is signed before the decision, as from a key's second request on.
   Also the wall time per decision: a lease's script runs longer in Redis, and a thread that
   waits longer for its reply is switched out more often and resumes slower, which this
   ratio includes (part 3 separates the hook's own Python).
2. A heartbeat's CPU per call in the hook's process, renewing 10, 100 and 1,000 leases of one
   pool, and the wall time of the call (one Redis script; on a shared machine a loose figure).
3. The same decisions with Redis's replies replayed (the script call answered at once with
   the reply Redis gave a warm decision of that kind): the hook's own Python per decision, no
   socket, no wait. The difference is what the hook's code adds to a lease; part 1's ratio
   also holds the longer wait.
"""

import argparse
import asyncio
import time
import uuid
from collections import deque

from common import django_setup, table, tenant_seed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--decisions", type=int, default=4000, help="of each kind")
    parser.add_argument("--block", type=int, default=200)
    args = parser.parse_args()
    django_setup()
    from quotas.hook.routing import pool_routes_reload

    pool, _, _, api_key, _ = tenant_seed()
    pool_routes_reload()
    asyncio.run(measure(args, pool, api_key))


async def measure(args, pool, api_key) -> None:
    from metering.api.leases import leases_update
    from quotas.hook import hook
    from quotas.hook.asgi import loop_threads_use
    from quotas.hook.gateway_tokens import GatewayIdentity
    from quotas.hook.hook import authorize_handle

    loop_threads_use()
    gateway = GatewayIdentity(token_id=0, name="bench")
    run = uuid.uuid4().hex[:8]
    base = {"api_key": api_key, "model": pool.model, "input_tokens": 200,
            "max_output_tokens": 300}
    lease = {"lease": True, "gateway_process": f"bench-{run}"}
    ids: deque[str] = deque(maxlen=1000)  # the latest: the earlier ones may have expired

    async def decide(kind: str, n: int) -> None:
        body = {**base, "request_id": f"{run}-{kind}{n}", **(lease if kind == "l" else {})}
        status, answer = await authorize_handle(body, gateway)
        assert status == 200 and answer["allowed"], answer
        if kind == "l":
            ids.append(answer["lease"]["id"])

    for n in range(200):  # warm: caches, connections, the key's org known (signed early)
        await decide("w", n)
        await decide("l", -n - 1)
    assert hook._key_owners, "the lease ids should be signed before the decision"
    spent, waited = {"p": 0.0, "l": 0.0}, {"p": 0.0, "l": 0.0}
    for start in range(0, args.decisions, args.block):
        for kind in ("p", "l") if start // args.block % 2 == 0 else ("l", "p"):
            began, wall = time.thread_time(), time.perf_counter()
            for n in range(start, start + args.block):
                await decide(kind, n)
            spent[kind] += time.thread_time() - began
            waited[kind] += time.perf_counter() - wall
    per = {k: v / args.decisions * 1e6 for k, v in spent.items()}
    wall = {k: v / args.decisions * 1e6 for k, v in waited.items()}
    table("authorize: CPU per decision in the hook's process (thread time)",
          ["decisions of each", "plain, µs", "lease, µs", "lease ÷ plain",
           "wall per decision, plain / lease, µs"],
          [[args.decisions, per["p"], per["l"], f"{per['l'] / per['p']:.3f}",
            f"{wall['p']:.0f} / {wall['l']:.0f}"]])

    rows = []
    for count in (10, 100, 1000):
        named = {"gateway_process": lease["gateway_process"],
                 "leases": [{"id": i, "delivered_output_tokens": 1} for i in list(ids)[:count]]}
        calls = max(5, 2000 // count)
        began, wall = time.thread_time(), time.perf_counter()
        for _ in range(calls):
            status, answer = await leases_update(named, gateway, release=False)
            assert status == 200 and {x["status"] for x in answer["leases"]} == {"renewed"}
        cpu, wall = time.thread_time() - began, time.perf_counter() - wall
        rows.append([count, calls, cpu / calls * 1e3, wall / calls * 1e3,
                     cpu / calls / count * 1e6])
    table("heartbeat: one call renewing N leases of one pool",
          ["leases", "calls", "hook CPU per call, ms", "wall per call, ms",
           "hook CPU per lease, µs"], rows)
    await replayed(args, decide)  # last: its leases are not in Redis


async def replayed(args, decide) -> None:
    """Part 2: the script call answered with the reply Redis gave the last warm-up decision of
    each kind (a plain one, a lease mapped in the call), alternating blocks as in part 1."""
    from quotas.limiter import engine
    from quotas.limiter.schema import AuthorizeArgs

    real, replies = engine.script_call, {}
    lease_owner = AuthorizeArgs._fields.index("lease_owner")

    async def recorded(name, *, keys, args):
        replies[name, bool(args[lease_owner])] = reply = await real(name, keys=keys, args=args)
        return reply

    async def replay(name, *, keys, args):
        return replies[name, bool(args[lease_owner])]

    engine.script_call = recorded
    try:
        await decide("w", -1)
        await decide("l", -1_000_000)
        engine.script_call = replay
        spent = {"p": 0.0, "l": 0.0}
        for start in range(0, args.decisions, args.block):
            for kind in ("p", "l") if start // args.block % 2 == 0 else ("l", "p"):
                began = time.thread_time()
                for n in range(start, start + args.block):
                    await decide(kind, -2_000_000 - n)
                spent[kind] += time.thread_time() - began
    finally:
        engine.script_call = real
    per = {k: v / args.decisions * 1e6 for k, v in spent.items()}
    table("authorize with Redis's replies replayed: the hook's Python per decision",
          ["decisions of each", "plain, µs", "lease, µs", "lease − plain, µs"],
          [[args.decisions, per["p"], per["l"], f"{per['l'] - per['p']:.2f}"]])


if __name__ == "__main__":
    main()
