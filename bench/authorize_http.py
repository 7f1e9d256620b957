"""Benchmark 1: authorize over HTTP with the production server configuration.

    DATABASE_URL=... REDIS_URL=redis://127.0.0.1:6379/4 python bench/authorize_http.py

Measures, against one gunicorn: an empty JSON endpoint at the WSGI layer where authorize is
served (the ceiling of this server and load generator; /healthz through Django is shown too),
authorize at saturation (decisions/s, p50/p99), then authorize at half of that peak (open
loop) for latency under a realistic load. Limits are set high so every decision
runs the whole script and is an admission.
"""

import argparse
import json

from common import django_setup, gunicorn, table, tenant_seed

from bench import loadgen


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--processes", type=int, default=2, help="load generator processes")
    parser.add_argument("--connections", type=int, default=8, help="per load process")
    args = parser.parse_args()
    django_setup()
    pool, _, _, api_key, gateway = tenant_seed()

    # The body is a template with the request_id spliced in: the load generator shares the
    # machine, so it must not spend more per request than it has to.
    head, tail = json.dumps({"request_id": "@", "api_key": api_key, "model": pool.model,
                             "input_tokens": 200, "max_output_tokens": 300}).split("@")
    head, tail = head.encode(), tail.encode()

    def body(index: int, n: int) -> bytes:
        return head + f"b{pool.pk}-{index}-{n}".encode() + tail

    authorize = loadgen.post_factory("/api/gateway/v1/authorize",
                                     {"Authorization": f"Bearer {gateway}"}, body)
    load = dict(processes=args.processes, connections=args.connections, seconds=args.seconds)
    rows = []
    with gunicorn(workers=args.workers, threads=args.threads) as port:
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
    for name, r in (("GET /healthz (through Django, for reference)", django),
                    ("GET /bench/empty (empty JSON, WSGI layer: the ceiling)", empty),
                    ("POST authorize, saturated", peak),
                    (f"POST authorize, open loop at {peak.rps / 2:,.0f}/s", half)):
        ok = r.statuses.get(200, 0) / max(r.requests, 1) * 100
        rows.append([name, r.rps, r.percentile(50), r.percentile(99), f"{ok:.1f}%"])
    table(f"authorize over HTTP: gunicorn {args.workers} worker(s) x {args.threads} thread(s), "
          f"{args.processes}x{args.connections} connections, {args.seconds:.0f} s each",
          ["endpoint", "req/s", "p50 ms", "p99 ms", "200s"], rows)
    print(f"\nauthorize / empty endpoint = {peak.rps / empty.rps:.2f}")


if __name__ == "__main__":
    main()
