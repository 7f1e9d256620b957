"""Benchmark 1: authorize over HTTP with the production server configuration.

    DATABASE_URL=... REDIS_URL=redis://127.0.0.1:6379/4 python bench/authorize_http.py

The production server (config/serve.py: granian, bodies read before a thread runs a request;
DEBUG off), or `--server gunicorn` for the WSGI layout it replaced. Limits are set high so
every decision runs the whole script and is an admission; every request_id is new.

With wrk (the default when it is on PATH): two empty JSON endpoints as ceilings, /bench/empty
at the bare WSGI layer where authorize is served and /healthz through Django's whole stack,
then authorize at 1, 2, 3, ... connections. Peak is the best of those; "half of peak" is the
connection count (up to the peak's) whose throughput came closest to half the peak (wrk is
closed loop, it has no fixed-rate mode), reported with its own rate and p99.

Then CPU per request (server processes, Redis, wrk) of the empty endpoint, of /bench/ping
(the same layer, after one Redis PING on the limiter's per-thread connection: the floor of any
endpoint that waits for Redis in a WSGI thread), of authorize, and of /bench/stand-in:
authorize with none of its Python (a body of its size read and parsed, one EVAL that keeps
Redis busy as long as authorize.lua took in authorize's row, an answer of its size). The
stand-in's ratio is the ceiling of authorize's for this server, this Redis and this script.
And of /bench/no-redis: authorize with all of its Python and the script's reply replayed, no
Redis call: the ceiling of a design that decides in the web process (per-process leases).

`--loadgen python`: the pure-Python generator (bench/loadgen.py), which shares the 2 cores
with the server (a floor): saturation, then an open loop at half of that peak.
"""

import argparse
import json
import resource
import uuid

from common import (
    SERVER_PIDS,
    SERVERS,
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
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--threads", type=int, default=8,
                        help="threads per process (either server)")
    parser.add_argument("--server", choices=SERVERS, default=SERVERS[0],
                        help="the production server, or the gunicorn layout it replaced")
    parser.add_argument("--loadgen", choices=["wrk", "python"],
                        default="wrk" if wrk.available() else "python")
    parser.add_argument("--sweep", default="1,2,3,4,6,8,12",
                        help="wrk: authorize connection counts")
    parser.add_argument("--ceiling-connections", default="2,4,8",
                        help="wrk: connection counts for the empty endpoints (best is kept)")
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
    with web_server(workers=args.workers, threads=args.threads,
                    kind=args.server) as port:
        if args.loadgen == "wrk":
            with_wrk(args, port, pool, headers, head, tail)
        else:
            with_python(args, port, pool, headers, head.encode(), tail.encode())


def with_wrk(args, port, pool, headers, head, tail) -> None:
    base = f"http://127.0.0.1:{port}"
    script = wrk.post_counter_script(PATH, headers, head, tail)
    run_tag = f"w{pool.pk}-{uuid.uuid4().hex[:6]}"

    def authorize(connections: int, seconds: float, n: int) -> wrk.Result:
        return wrk.run(base + PATH, connections=connections, seconds=seconds, script=script,
                       args=(f"{run_tag}-{n}",))

    authorize(2, 2, 0)  # warm up every worker's caches, and Django's (URLconf, middleware)
    wrk.run(base + "/healthz", connections=4, seconds=1)
    ceilings = [int(c) for c in args.ceiling_connections.split(",")]
    bare = [wrk.run(base + "/bench/empty", connections=c, seconds=args.seconds)
            for c in ceilings]
    django = [wrk.run(base + "/healthz", connections=c, seconds=args.seconds) for c in ceilings]
    sweep = [authorize(c, args.seconds, n)
             for n, c in enumerate(int(c) for c in args.sweep.split(",")) if c > 0]
    def stand_in(loops: int) -> wrk.Result:
        body_head, body_tail = _stand_in_body(head, tail, loops)
        return wrk.run(base + "/bench/stand-in", connections=4, seconds=args.seconds,
                       script=wrk.post_counter_script("/bench/stand-in", headers, body_head,
                                                      body_tail),
                       args=(f"{run_tag}-s",))

    def no_redis() -> wrk.Result:
        return wrk.run(base + "/bench/no-redis", connections=4, seconds=args.seconds,
                       script=wrk.post_counter_script("/bench/no-redis", headers, head, tail),
                       args=(f"{run_tag}-n",))

    cpu, script_us = _cpu_per_request(args, port, base, authorize, stand_in, no_redis)
    # Checked after the sweep so that it cannot warm anything up for it.
    metrics = wrk.run(base + "/metrics", connections=1, seconds=1)

    peak = max(sweep, key=lambda r: r.rps)
    # On the rising side of the curve only: past the peak, fewer answers/s means overload.
    half = min((r for r in sweep if r.connections <= peak.connections),
               key=lambda r: abs(r.rps - peak.rps / 2))
    best_bare, best_django = max(bare, key=lambda r: r.rps), max(django, key=lambda r: r.rps)
    rows = []
    for name, results in (("GET /bench/empty (bare WSGI, empty JSON)", bare),
                          ("GET /healthz (through Django, JSON)", django),
                          ("POST authorize", sweep)):
        for r in results:
            mark = (" <- peak" if r is peak else "") + (" <- ~half of peak" if r is half else "")
            rows.append([name + mark, r.connections, r.rps, f"{r.p50_ms:.2f}",
                         f"{r.p99_ms:.2f}", r.errors])
    table(f"authorize over HTTP, wrk -t1 (closed loop): {args.server} {args.workers} worker(s) x "
          f"{args.threads} thread(s), {args.seconds:.0f} s per row",
          ["endpoint", "conns", "req/s", "p50 ms", "p99 ms", "errors"], rows)
    print(f"\npeak authorize: {peak.rps:,.0f} decisions/s at {peak.connections} connections "
          f"(p99 {peak.p99_ms:.2f} ms)")
    print(f"authorize / bare WSGI empty endpoint = {peak.rps / best_bare.rps:.2f} "
          f"({best_bare.rps:,.0f}/s)")
    print(f"authorize / Django empty JSON endpoint (/healthz) = "
          f"{peak.rps / best_django.rps:.2f} ({best_django.rps:,.0f}/s)")
    print(f"~half of peak (no fixed-rate mode in wrk: the connection count whose rate was "
          f"closest to {peak.rps / 2:,.0f}/s, at or below the peak's connections): "
          f"{half.connections} connections, "
          f"{half.rps:,.0f}/s, p50 {half.p50_ms:.2f} ms, p99 {half.p99_ms:.2f} ms")
    print(f"/metrics answered {'ok' if metrics.errors == 0 else f'{metrics.errors} errors'}")
    table("CPU per request, wrk at 4 connections: what the throughput ratio is made of, "
          "measured in CPU time, which other load on the machine does not distort",
          ["endpoint", "server µs", "Redis µs", "wrk µs", "total µs"], cpu)
    empty_total, ping_total, authorize_total, stand_in_total, no_redis_total = (
        row[-1] for row in cpu)
    print(f"\nempty endpoint / authorize in CPU per request = "
          f"{empty_total / authorize_total:.2f} (the throughput ratio of a machine whose cores "
          "they saturate; Redis's share counts whatever else that Redis serves)")
    print(f"empty endpoint / ping endpoint = {empty_total / ping_total:.2f}: the ceiling of "
          "that ratio for any endpoint that waits for one Redis reply in a WSGI thread")
    print(f"empty endpoint / stand-in = {empty_total / stand_in_total:.2f}: the ceiling of that "
          "ratio for authorize with none of its Python (its body read and parsed, Redis busy "
          f"{script_us:.1f} µs per call as authorize.lua was in the row above, its answer's size)")
    print(f"empty endpoint / no-redis = {empty_total / no_redis_total:.2f}: the ceiling of that "
          "ratio for authorize deciding without a Redis call (all of its Python, the script's "
          "reply replayed): per-process leases, before their own bookkeeping")


def _stand_in_body(head: str, tail: str, loops: int) -> tuple[str, str]:
    """Authorize's body template with `stand_in_loops` added (the stand-in reads it)."""
    return head, tail[:-1] + f', "stand_in_loops": {loops}}}'


def _script_us(redis) -> tuple[int, int]:
    stats = redis.info("commandstats").get("cmdstat_evalsha", {"calls": 0, "usec": 0})
    return stats["calls"], stats["usec"]


def _cpu_per_request(args, port, base, authorize, stand_in, no_redis
                     ) -> tuple[list[list], float]:
    """CPU microseconds per request of the web server (its processes), Redis and wrk, for the
    empty endpoint, the one that only asks Redis PING, authorize, its stand-in (Redis kept
    busy as long as authorize.lua was in authorize's row, measured there by Redis: then
    calibrated), and authorize without Redis. Also the microseconds authorize.lua took per call
    inside Redis."""
    from bench.wsgi_ceiling import stand_in_loops
    from quotas.limiter.connection import limiter_client

    server, redis = SERVER_PIDS[port], limiter_client(bulk=True)

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

    rows = [row("GET /bench/empty", lambda: wrk.run(base + "/bench/empty", connections=4,
                                                     seconds=args.seconds)),
            row("GET /bench/ping", lambda: wrk.run(base + "/bench/ping", connections=4,
                                                    seconds=args.seconds))]
    calls, usec = _script_us(redis)
    rows.append(row("POST authorize", lambda: authorize(4, args.seconds, "cpu")))
    calls_after, usec_after = _script_us(redis)
    script_us = (usec_after - usec) / max(calls_after - calls, 1)
    loops = stand_in_loops(redis, microseconds=script_us)
    rows.append(row("POST /bench/stand-in", lambda: stand_in(loops)))
    rows.append(row("POST /bench/no-redis", no_redis))
    return rows, script_us


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
    table(f"authorize over HTTP, Python load generator: {args.server} {args.workers} worker(s) x "
          f"{args.threads} thread(s), {args.processes}x{args.connections} connections, "
          f"{args.seconds:.0f} s each",
          ["endpoint", "req/s", "p50 ms", "p99 ms", "200s"], rows)
    print(f"\nauthorize / bare WSGI empty endpoint = {peak.rps / empty.rps:.2f}")
    print(f"authorize / Django empty JSON endpoint (/healthz) = {peak.rps / django.rps:.2f}")


if __name__ == "__main__":
    main()
