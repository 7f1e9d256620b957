"""Benchmark 1: authorize over HTTP with the production server configuration.

    DATABASE_URL=... REDIS_URL=redis://127.0.0.1:6379/4 python bench/authorize_http.py

The production server (config/serve.py: uvicorn; authorize decided on its event loop, every
other request through the bridge's threads; DEBUG off). Limits are set high so every decision
runs the whole script and is an admission; every request_id is new.

With wrk (the default when it is on PATH): the empty JSON endpoints as ceilings, /bench/empty
at the bare WSGI layer (where Django's requests are served: the yardstick of authorize's ratio),
/bench/loop-empty on the event loop (where authorize is served: the stricter one) and
/healthz through Django's whole stack, each at the same connection counts (the best is kept),
then authorize at 1, 2, 4, ... connections. Peak is the best of those; "half of peak" is the
connection count (up to the peak's) whose throughput came closest to half the peak (wrk is
closed loop, it has no fixed-rate mode), reported with its own rate and p99. Then the ratio
again from pairs of short rows back to back (`--pairs`, `--pair-seconds`): authorize at the
peak's connections and the empty endpoint at its best's, the order alternating. A VM whose
speed drifts within a run (seen here: the same command gave 0.30 and 0.57) skews the first
ratio, whose two sides are measured a minute apart; the pairs' median does not drift with it.

Then CPU per request (server processes, Redis, wrk), which other load on the machine does not
distort, of both empty endpoints, of authorize, of /bench/loop-stand-in (authorize with none
of its Python: a body of its size read and parsed, one EVAL over the loop's connection that
keeps Redis busy as long as authorize.lua took in authorize's row, an answer of its size: the
ceiling of authorize's ratio for this server, this Redis and this script) and of
/bench/loop-no-redis (authorize whole, the script's reply replayed: its Python on the loop).

`--loadgen python`: the pure-Python generator (bench/loadgen.py), which shares the 2 cores
with the server (a floor): saturation, then an open loop at half of that peak.
"""

import argparse
import json
import resource
import statistics
import uuid

from common import (
    SERVER_PIDS,
    django_setup,
    process_tree_cpu_seconds,
    table,
    tenant_seed,
    web_server,
)

from bench import loadgen, wrk

PATH = "/api/gateway/v1/authorize"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10)
    # The production default (config/serve.py: about one per core). Authorize is decided on
    # each worker's event loop: a third process on 2 cores only contends for them (alternating
    # full runs on one VM: peak 5,256 against 4,594/s, ratio 0.42 against 0.36).
    parser.add_argument("--workers", type=int, default=2, help="server processes")
    parser.add_argument("--threads", type=int, default=8, help="threads per process")
    parser.add_argument("--loadgen", choices=["wrk", "python"],
                        default="wrk" if wrk.available() else "python")
    parser.add_argument("--sweep", default="1,2,4,8,12,16,24",
                        help="wrk: authorize connection counts")
    parser.add_argument("--ceiling-connections", default="2,4,8,16,24",
                        help="wrk: connection counts for the empty endpoints (best is kept)")
    parser.add_argument("--pairs", type=int, default=6,
                        help="wrk: authorize and empty endpoint rows back to back, this many times")
    parser.add_argument("--pair-seconds", type=float, default=2, help="wrk: per paired row")
    parser.add_argument("--processes", type=int, default=2, help="python: load processes")
    parser.add_argument("--connections", type=int, default=8, help="python: per process")
    args = parser.parse_args()
    django_setup()
    pool, _, _, api_key, gateway = tenant_seed()

    # The body is a template with the request_id spliced in: the load generator shares the
    # machine, so it must not spend more per request than it has to.
    head, tail = json.dumps({"request_id": "@", "api_key": api_key, "model": pool.model,
                             "input_tokens": 200, "max_output_tokens": 300}).split("@")
    headers = {"Authorization": f"Bearer {gateway}"}
    with web_server(workers=args.workers, threads=args.threads) as port:
        if args.loadgen == "wrk":
            with_wrk(args, port, pool, headers, head, tail)
        else:
            with_python(args, port, pool, headers, head.encode(), tail.encode())


def with_wrk(args, port, pool, headers, head, tail) -> None:
    from quotas.limiter.connection import limiter_client

    base = f"http://127.0.0.1:{port}"
    script = wrk.post_counter_script(PATH, headers, head, tail)
    run_tag = f"w{pool.pk}-{uuid.uuid4().hex[:6]}"

    def authorize(connections: int, seconds: float, n: int) -> wrk.Result:
        return wrk.run(base + PATH, connections=connections, seconds=seconds, script=script,
                       args=(f"{run_tag}-{n}",))

    def posted(path: str, body_head: str, body_tail: str, tag: str):
        def run(connections: int = 4) -> wrk.Result:
            return wrk.run(base + path, connections=connections, seconds=args.seconds,
                           script=wrk.post_counter_script(path, headers, body_head, body_tail),
                           args=(f"{run_tag}-{tag}{connections}",))
        return run

    authorize(2, 2, 0)  # warm up every worker's caches, and Django's (URLconf, middleware)
    wrk.run(base + "/healthz", connections=4, seconds=1)
    ceilings = [int(c) for c in args.ceiling_connections.split(",")]
    bare = [wrk.run(base + "/bench/empty", connections=c, seconds=args.seconds)
            for c in ceilings]
    on_loop = [wrk.run(base + "/bench/loop-empty", connections=c, seconds=args.seconds)
               for c in ceilings]
    django = [wrk.run(base + "/healthz", connections=c, seconds=args.seconds) for c in ceilings]
    redis = limiter_client(bulk=True)
    calls, usec = _script_us(redis)
    sweep = [authorize(c, args.seconds, n)
             for n, c in enumerate(int(c) for c in args.sweep.split(",")) if c > 0]
    calls_after, usec_after = _script_us(redis)
    script_us = (usec_after - usec) / max(calls_after - calls, 1)  # authorize.lua, in Redis
    from bench.asgi_ceiling import stand_in_loops

    # Calibrated to keep Redis as busy as authorize.lua kept it during the sweep.
    stand_in = posted("/bench/loop-stand-in",
                      *_stand_in_body(head, tail, stand_in_loops(redis, microseconds=script_us)),
                      "s")
    replayed = posted("/bench/loop-no-redis", head, tail, "n")
    stand_ins = [stand_in(c) for c in ceilings]
    no_redis = [replayed(c) for c in ceilings]
    cpu = _cpu_per_request(args, base, authorize, stand_in, replayed)
    # Checked after the sweep so that it cannot warm anything up for it.
    metrics = wrk.run(base + "/metrics", connections=1, seconds=1)

    peak = max(sweep, key=lambda r: r.rps)
    # On the rising side of the curve only: past the peak, fewer answers/s means overload.
    half = min((r for r in sweep if r.connections <= peak.connections),
               key=lambda r: abs(r.rps - peak.rps / 2))
    best_bare, best_django = max(bare, key=lambda r: r.rps), max(django, key=lambda r: r.rps)
    pairs = _paired(args, lambda seconds, n: authorize(peak.connections, seconds, f"p{n}"),
                    lambda seconds: wrk.run(base + "/bench/empty",
                                            connections=best_bare.connections, seconds=seconds))
    rows = []
    for name, results in (("GET /bench/empty (bare WSGI layer, empty JSON)", bare),
                          ("GET /bench/loop-empty (event loop, empty JSON)", on_loop),
                          ("GET /healthz (through Django, JSON)", django),
                          ("POST /bench/loop-stand-in (none of authorize's Python)", stand_ins),
                          ("POST /bench/loop-no-redis (no Redis call)", no_redis),
                          ("POST authorize", sweep)):
        for r in results:
            mark = (" <- peak" if r is peak else "") + (" <- ~half of peak" if r is half else "")
            rows.append([name + mark, r.connections, r.rps, f"{r.p50_ms:.2f}",
                         f"{r.p99_ms:.2f}", r.errors])
    table(f"authorize over HTTP, wrk -t1 (closed loop): uvicorn {args.workers} worker(s) x "
          f"{args.threads} thread(s), {args.seconds:.0f} s per row",
          ["endpoint", "conns", "req/s", "p50 ms", "p99 ms", "errors"], rows)
    print(f"\npeak authorize: {peak.rps:,.0f} decisions/s at {peak.connections} connections "
          f"(p99 {peak.p99_ms:.2f} ms)")
    print(f"authorize / bare WSGI empty endpoint = {peak.rps / best_bare.rps:.2f} "
          f"({best_bare.rps:,.0f}/s): authorize's ratio")
    if on_loop:
        best_loop = max(on_loop, key=lambda r: r.rps)
        print(f"authorize / event-loop empty endpoint = {peak.rps / best_loop.rps:.2f} "
              f"({best_loop.rps:,.0f}/s): the stricter reading, the layer authorize is served at")
    print(f"authorize / Django empty JSON endpoint (/healthz) = "
          f"{peak.rps / best_django.rps:.2f} ({best_django.rps:,.0f}/s)")
    if stand_ins:
        best_stand_in = max(stand_ins, key=lambda r: r.rps)
        best_no_redis = max(no_redis, key=lambda r: r.rps)
        print(f"stand-in / bare WSGI empty endpoint = {best_stand_in.rps / best_bare.rps:.2f}: "
              "the ceiling of authorize's ratio: authorize with none of its Python (its body "
              f"read and parsed, Redis busy {script_us:.1f} µs per call as authorize.lua was in "
              "the sweep, its answer's size)")
        print(f"no-redis / bare WSGI empty endpoint = {best_no_redis.rps / best_bare.rps:.2f}: "
              "authorize whole with the script's reply replayed, no Redis call")
    if pairs:
        ratios = sorted(a.rps / e.rps for a, e in pairs)
        print(f"paired: authorize at {peak.connections} and the bare-WSGI empty endpoint at "
              f"{best_bare.connections} connections, {len(pairs)} pairs of {args.pair_seconds:g} s "
              f"rows back to back (the order alternating): ratio median "
              f"{statistics.median(ratios):.2f}, from {ratios[0]:.2f} to {ratios[-1]:.2f} "
              "(what a machine whose speed drifts during the run does to the ratio above, whose "
              "two sides were measured a minute apart)")
    print(f"~half of peak (no fixed-rate mode in wrk: the connection count whose rate was "
          f"closest to {peak.rps / 2:,.0f}/s, at or below the peak's connections): "
          f"{half.connections} connections, "
          f"{half.rps:,.0f}/s, p50 {half.p50_ms:.2f} ms, p99 {half.p99_ms:.2f} ms")
    print(f"/metrics answered {'ok' if metrics.errors == 0 else f'{metrics.errors} errors'}")
    if not cpu:
        return
    table("CPU per request, wrk at 4 connections: what the throughput ratio is made of, "
          "measured in CPU time, which other load on the machine does not distort",
          ["endpoint", "server µs", "Redis µs", "wrk µs", "total µs"], cpu)
    empty, loop_empty, authorized, stand_in_total, no_redis_total = (row[-1] for row in cpu)
    print(f"\nempty endpoint (bare WSGI) / authorize in CPU per request = "
          f"{empty / authorized:.2f}; event-loop empty / authorize = {loop_empty / authorized:.2f}"
          " (the throughput ratios of a machine whose cores they saturate; Redis's share counts "
          "whatever else that Redis serves)")
    print(f"empty endpoint (bare WSGI) / stand-in = {empty / stand_in_total:.2f}, "
          f"/ no-redis = {empty / no_redis_total:.2f}, by CPU")
    print(f"authorize's Python on the loop, without the Redis call: "
          f"{no_redis_total - loop_empty:,.0f} µs per request above the event-loop empty "
          "endpoint")


def _paired(args, authorize, empty) -> list[tuple[wrk.Result, wrk.Result]]:
    """(authorize, empty endpoint) rows measured back to back, `args.pairs` times, the order
    alternating: both sides of each ratio under the same conditions."""
    pairs = []
    for n in range(args.pairs):
        if n % 2:
            e = empty(args.pair_seconds)
            a = authorize(args.pair_seconds, n)
        else:
            a = authorize(args.pair_seconds, n)
            e = empty(args.pair_seconds)
        pairs.append((a, e))
    return pairs


def _stand_in_body(head: str, tail: str, loops: int) -> tuple[str, str]:
    """Authorize's body template with `stand_in_loops` added (the stand-in reads it)."""
    return head, tail[:-1] + f', "stand_in_loops": {loops}}}'


def _script_us(redis) -> tuple[int, int]:
    stats = redis.info("commandstats").get("cmdstat_evalsha", {"calls": 0, "usec": 0})
    return stats["calls"], stats["usec"]


def _cpu_per_request(args, base, authorize, stand_in, no_redis) -> list[list]:
    """CPU microseconds per request of the web server (its processes), Redis and wrk, for the
    two empty endpoints, authorize, its stand-in and authorize without Redis."""
    from quotas.limiter.connection import limiter_client

    server, redis = SERVER_PIDS[int(base.rsplit(":", 1)[1])], limiter_client(bulk=True)

    def used() -> tuple[float, float, float]:
        info = redis.info("cpu")
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        return (process_tree_cpu_seconds(server), info["used_cpu_sys"] + info["used_cpu_user"],
                children.ru_utime + children.ru_stime)

    def row(name: str, run) -> list:
        before = used()
        result = run()
        spent = [1e6 * (after - first) / result.requests
                 for first, after in zip(before, used(), strict=True)]
        return [name, *(f"{x:,.0f}" for x in spent), sum(spent)]

    return [*(row(f"GET {path}", lambda path=path: wrk.run(base + path, connections=4,
                                                            seconds=args.seconds))
              for path in ("/bench/empty", "/bench/loop-empty")),
            row("POST authorize", lambda: authorize(4, args.seconds, "cpu")),
            row("POST /bench/loop-stand-in", stand_in),
            row("POST /bench/loop-no-redis", no_redis)]


def with_python(args, port, pool, headers, head: bytes, tail: bytes) -> None:
    def body(index: int, n: int) -> bytes:
        return head + f"b{pool.pk}-{index}-{n}".encode() + tail

    authorize = loadgen.post_factory(PATH, headers, body)
    load = dict(processes=args.processes, connections=args.connections, seconds=args.seconds)
    loadgen.run(host="127.0.0.1", port=port, request_factory=authorize, processes=1,
                connections=2, seconds=1)  # warm up every worker's caches
    django = loadgen.run(host="127.0.0.1", port=port,
                         request_factory=loadgen.get_factory("/healthz"), **load)
    empty = loadgen.run(host="127.0.0.1", port=port,
                        request_factory=loadgen.get_factory("/bench/empty"), **load)
    peak = loadgen.run(host="127.0.0.1", port=port, request_factory=authorize, **load)
    # Open loop: more connections, so a stall queues requests instead of delaying sends.
    half = loadgen.run(host="127.0.0.1", port=port, request_factory=authorize,
                       rate=peak.rps / 2, **{**load, "connections": 4 * args.connections})
    rows = []
    for name, r in (("GET /healthz (through Django, JSON)", django),
                    ("GET /bench/empty (bare WSGI, empty JSON)", empty),
                    ("POST authorize, saturated", peak),
                    (f"POST authorize, open loop at {peak.rps / 2:,.0f}/s", half)):
        ok = r.statuses.get(200, 0) / max(r.requests, 1) * 100
        rows.append([name, r.rps, r.percentile(50), r.percentile(99), f"{ok:.1f}%"])
    table(f"authorize over HTTP, Python load generator: uvicorn {args.workers} worker(s) x "
          f"{args.threads} thread(s), {args.processes}x{args.connections} connections, "
          f"{args.seconds:.0f} s each",
          ["endpoint", "req/s", "p50 ms", "p99 ms", "200s"], rows)
    print(f"\nauthorize / bare WSGI empty endpoint = {peak.rps / empty.rps:.2f}")
    print(f"authorize / Django empty JSON endpoint (/healthz) = {peak.rps / django.rps:.2f}")


if __name__ == "__main__":
    main()
