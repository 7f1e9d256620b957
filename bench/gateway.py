"""Benchmark: the reference gateway against the upstream it fronts, and LiteLLM's proxy.

    DATABASE_URL=... REDIS_URL=redis://127.0.0.1:6379/4 python bench/gateway.py [--litellm PATH]
        [--baseline CHECKOUT] [--rounds N]

One run, one simulated upstream (`python -m gateway.sim`, 750 tokens/s, 20 ms to the first
token), three ways to reach it:

- direct: the load generator talks to the simulated upstream itself;
- gateway: `python -m gateway --workers W`, admitting every request through Sluice's hook
  (the production web server, config/serve.py, with a seeded tenant whose allocation never
  refuses) and reporting usage to it in batches;
- LiteLLM: `litellm --config ... --num_workers W` (same W), the deployment limited by tpm/rpm
  (the closest it has to an allocation without a database), master key, no database.

(a) small non-streaming completions (8 output tokens), `wrk`: requests/s at --connections
(closed loop), and latency at --latency-connections (a light load, so latency is service time,
not queueing); "added" is the path's percentile minus direct's.
(b) --streams concurrent streams of --stream-tokens tokens each (closed loop: each slot starts
its next stream when the last ended, slots staggered over one stream's length) from
--processes asyncio processes with a raw HTTP/1.1 client: time to first token (from the connect
to the first content token) and delivered tokens/s per stream (tokens after the first over the
time from the first to the last).

--baseline CHECKOUT adds "baseline": the same gateway command run from another checkout (a
`git worktree add --detach /tmp/gw-main main`), against the same Sluice and upstream, so the
code before and after a change is measured in one run; --rounds N repeats every measurement N
times, the paths alternated within each round, each round a row. On a machine shared with other
work, compare the ratios and the CPU columns, which the neighbours' load disturbs least: CPU µs
per request (a) and per streamed token (b) are the gateway process's own CPU over what it served.

LiteLLM is a benchmark-only extra (`bench`, in a venv of its own): its executable is
--litellm, else `litellm` on PATH, else .venv/bin/litellm; without it the LiteLLM rows say why
they are missing and the others are measured.
"""

import argparse
import asyncio
import contextlib
import json
import multiprocessing as mp
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from common import (
    ROOT,
    SERVER_PIDS,
    django_setup,
    free_port,
    http_wait,
    process_served,
    process_tree_cpu_seconds,
    table,
    tenant_seed,
    web_server,
)

from bench import wrk

UPSTREAM_KEY = "sim-bench-upstream"
LITELLM_MASTER_KEY = "sk-bench-master"
TOKEN = re.compile(rb'"content": ?"(?!")')  # a content delta that is not empty


@dataclass
class Target:
    name: str
    port: int
    authorization: str
    pids: dict[str, int] = field(default_factory=dict)  # "proxy"/"Sluice" -> pid (CPU columns)


# --- the servers -----------------------------------------------------------------------------
def litellm_find(explicit: str | None) -> tuple[str | None, str]:
    """The litellm executable, or None and why."""
    if explicit:
        if os.access(explicit, os.X_OK):
            return explicit, ""
        return None, f"--litellm {explicit} is not an executable file"
    found = shutil.which("litellm")
    if found:
        return found, ""
    local = ROOT / ".venv" / "bin" / "litellm"
    if os.access(local, os.X_OK):
        return str(local), ""
    return None, ("no `litellm` executable: not given with --litellm, not on PATH, not in "
                  f"{ROOT / '.venv/bin'} (install the `bench` extra in a venv of its own, "
                  "since it cannot share one with `dev`, and pass --litellm PATH/bin/litellm)")


def litellm_env() -> dict:
    """No database and no Redis for LiteLLM: it reads DATABASE_URL (and would want prisma) and
    REDIS_URL (shared rate limits) from the environment, which hold Sluice's."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "DIRECT_URL", "REDIS_URL", "REDIS_HOST", "REDIS_PORT")}
    return {**env, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}


def litellm_config(*, model: str, upstream: str) -> str:
    return json.dumps({  # JSON is YAML
        "model_list": [{"model_name": model, "litellm_params": {
            "model": f"openai/{model}", "api_base": upstream, "api_key": UPSTREAM_KEY,
            "tpm": 100_000_000, "rpm": 1_000_000}}],
        "litellm_settings": {"drop_params": True},
        "general_settings": {"master_key": LITELLM_MASTER_KEY},
    }, indent=1)


# --- (a) small completions with wrk ----------------------------------------------------------
def _completion_script(target: Target, model: str, max_tokens: int) -> str:
    body = json.dumps({"model": model, "max_tokens": max_tokens,
                       "messages": [{"role": "user", "content": "Say hello in a few words."}]})
    return (f"wrk.method = \"POST\"\nwrk.body = {wrk.lua_string(body)}\n"
            f"wrk.headers[\"Content-Type\"] = \"application/json\"\n"
            f"wrk.headers[\"Authorization\"] = {wrk.lua_string(target.authorization)}\n")


def ok_rps(result: wrk.Result) -> float:
    """Successful answers per second (wrk's Requests/sec counts errors too)."""
    return (result.requests - result.errors) / result.seconds


ADMISSION = re.compile(r'^gen_ai_gateway_admission_duration_seconds_bucket\{le="([^"]+)"\} '
                       r'([0-9.e+]+)$', re.M)


def admission_buckets(target: Target) -> dict[float, float] | None:
    """The gateway's histogram of Sluice's authorize durations (None: a gateway without it,
    or another path)."""
    import httpx

    if "proxy" not in target.pids:
        return None
    try:
        text = httpx.get(f"http://127.0.0.1:{target.port}/metrics", timeout=5).text
    except httpx.HTTPError:
        return None
    found = {float(le): float(n) for le, n in ADMISSION.findall(text)}
    return found or None


def admission_p50_ms(before: dict | None, after: dict | None) -> float:
    """The median authorize duration between two snapshots (the bucket's upper bound)."""
    if not before or not after:
        return float("nan")
    counts = sorted((le, after[le] - before.get(le, 0.0)) for le in after)
    total = counts[-1][1]
    return next((1000 * le for le, n in counts if n >= total / 2), float("nan")) if total \
        else float("nan")


def completions(target: Target, args, model: str) -> dict:
    url = f"http://127.0.0.1:{target.port}/v1/chat/completions"
    script = _completion_script(target, model, args.completion_tokens)
    wrk.run(url, connections=4, seconds=2, script=script)  # warm up
    admitted = admission_buckets(target)
    light = wrk.run(url, connections=args.latency_connections, seconds=args.seconds,
                    script=script)
    admission = admission_p50_ms(admitted, admission_buckets(target))
    sweep = []
    for connections in (int(c) for c in args.connections.split(",")):
        before = {k: process_tree_cpu_seconds(p) for k, p in target.pids.items()}
        result = wrk.run(url, connections=connections, seconds=args.seconds, script=script)
        cpu = {k: 1e6 * (process_tree_cpu_seconds(p) - before[k]) / max(result.requests, 1)
               for k, p in target.pids.items()}
        sweep.append((result, cpu))
    peak, cpu = max(sweep, key=lambda rc: ok_rps(rc[0]))
    return {"light": light, "peak": peak, "cpu": cpu, "admission_ms": admission}


# --- (b) concurrent streams ------------------------------------------------------------------
def _stream_request(target: Target, model: str, tokens: int) -> bytes:
    body = json.dumps({"model": model, "max_tokens": tokens, "stream": True,
                       "messages": [{"role": "user", "content": "Write a long story."}]}).encode()
    return (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: {target.authorization}\r\nContent-Type: application/json\r\n"
            f"Accept: text/event-stream\r\nConnection: close\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


async def _one_stream(port: int, request: bytes, record: list) -> None:
    """Fills record = [status, time to first token s, tokens, first-to-last s] as it goes, so
    that a stream cut at the end of the run still counts what it delivered."""
    started = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        record[0] = int(head.split(b" ", 2)[1])
        first, pending = None, b""
        while data := await reader.read(65536):
            pending += data
            cut = pending.rfind(b"\n\n")
            if cut < 0:
                continue
            n = len(TOKEN.findall(pending, 0, cut))
            pending = pending[cut + 2:]
            if n:
                last = time.perf_counter()
                if first is None:
                    first, record[1] = last, last - started
                record[2] += n
                record[3] = last - first
    finally:
        writer.close()


def _stream_worker(port, request, slots, offset, total_slots, period, start, seconds, grace,
                   queue):
    async def slot(index: int, out: list) -> None:
        await asyncio.sleep(max(0.0, start + period * index / total_slots - time.perf_counter()))
        while time.perf_counter() < start + seconds:
            record = [0, None, 0, 0.0]
            out.append(record)
            with contextlib.suppress(OSError, asyncio.IncompleteReadError, ValueError):
                await _one_stream(port, request, record)

    async def main() -> list:
        out: list = []
        tasks = [asyncio.create_task(slot(offset + i, out)) for i in range(slots)]
        await asyncio.wait(tasks, timeout=start + seconds + grace - time.perf_counter())
        for task in tasks:  # streams still running after the grace period: cut, as they are
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return out

    queue.put(asyncio.run(main()))


def streams(target: Target, args, model: str, *, warm: bool = True) -> dict:
    request = _stream_request(target, model, args.stream_tokens)
    ctx = mp.get_context("fork")
    period = args.stream_tokens / args.rate  # one stream's length: the slots' stagger

    def run(total: int, seconds: float) -> list:
        queue = ctx.Queue()
        start = time.perf_counter() + 0.5
        per = [total // args.processes + (i < total % args.processes)
               for i in range(args.processes)]
        procs = [ctx.Process(target=_stream_worker, args=(
            target.port, request, n, sum(per[:i]), total, period, start, seconds,
            args.stream_grace, queue))
            for i, n in enumerate(per) if n]
        for p in procs:
            p.start()
        results = [r for _ in procs for r in queue.get()]
        for p in procs:
            p.join()
        return results

    if warm:
        run(min(10, args.streams), 1)
    before = {k: process_tree_cpu_seconds(p) for k, p in target.pids.items()}
    admitted = admission_buckets(target)
    began = time.perf_counter()
    results = run(args.streams, args.seconds)
    elapsed = time.perf_counter() - began
    tokens = max(sum(r[2] for r in results), 1)
    cpu = {k: 1e6 * (process_tree_cpu_seconds(p) - before[k]) / tokens
           for k, p in target.pids.items()}
    complete = [r for r in results if r[0] == 200 and r[2] >= args.stream_tokens]
    # Over every stream that delivered, cut ones included (what they delivered, while they did)
    ttft = sorted(1000 * r[1] for r in results if r[1] is not None)
    rates = sorted((r[2] - 1) / r[3] for r in results if r[3] > 0)
    return {"started": len(results), "complete": len(complete), "ttft": ttft, "rates": rates,
            "no_token": sum(r[1] is None for r in results),
            "tokens_per_s": sum(r[2] for r in results) / elapsed, "cpu": cpu,
            "admission_ms": admission_p50_ms(admitted, admission_buckets(target))}


def pct(values: list[float], p: float) -> float:
    return values[min(len(values) - 1, int(len(values) * p / 100))] if values else float("nan")


def fmt(value: float, spec: str) -> str:
    return "-" if value != value else format(value, spec)  # NaN: no stream delivered a token


# --- the run ---------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10, help="per measurement")
    parser.add_argument("--workers", type=int, default=1,
                        help="gateway processes, and LiteLLM's --num_workers")
    parser.add_argument("--sluice-workers", type=int, default=2)
    parser.add_argument("--connections", default="16,128",
                        help="(a) wrk, saturation: the best of these connection counts")
    parser.add_argument("--latency-connections", type=int, default=4, help="(a) wrk, latency")
    parser.add_argument("--completion-tokens", type=int, default=8)
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--stream-tokens", type=int, default=1500)
    parser.add_argument("--rate", type=float, default=750.0, help="the upstream's tokens/s")
    parser.add_argument("--ttft-ms", type=float, default=20.0, help="the upstream's TTFT")
    parser.add_argument("--tick-ms", type=float, default=10.0,
                        help="the upstream writes the tokens due every tick (0: each token)")
    parser.add_argument("--baseline", help="a checkout whose gateway to measure too")
    parser.add_argument("--rounds", type=int, default=1, help="measure every path N times")
    parser.add_argument("--processes", type=int, default=2, help="(b) load processes")
    parser.add_argument("--stream-grace", type=float, default=20,
                        help="(b) seconds after the run before unfinished streams are cut")
    parser.add_argument("--litellm", help="the litellm executable")
    parser.add_argument("--skip", default="",
                        help="comma-separated: direct,gateway,litellm,a,b")
    args = parser.parse_args()
    if not wrk.available():
        sys.exit("bench/gateway.py needs wrk on PATH (https://github.com/wg/wrk)")
    django_setup()
    pool, _, _, api_key, gateway_token = tenant_seed()
    litellm, litellm_missing = litellm_find(args.litellm)
    skip = set(filter(None, args.skip.split(",")))
    if "litellm" in skip:
        litellm, litellm_missing = None, "skipped (--skip litellm)"
    tmp = Path(tempfile.mkdtemp(prefix="sluice-bench-gateway-"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    load = [f"machine load before: {_uptime()}"]
    paths: list[Target] = []
    with contextlib.ExitStack() as stack:
        sluice_port = stack.enter_context(web_server(workers=args.sluice_workers))
        sim_port, gateway_port, litellm_port = free_port(), free_port(), free_port()
        sim = stack.enter_context(process_served(
            [sys.executable, "-m", "gateway.sim", "--port", str(sim_port), "--rate",
             str(args.rate), "--ttft-ms", str(args.ttft_ms), "--tick-ms", str(args.tick_ms),
             "--api-key", UPSTREAM_KEY,
             "--models", pool.model],
            env=env, cwd=str(tmp), log=tmp / "sim.log", what="the simulated upstream",
            ready_url=f"http://127.0.0.1:{sim_port}/v1/models", ready_seconds=60))
        if litellm:
            # Started before the gateway and waited for last: it takes a minute or more to
            # start on a busy 2-core machine.
            (tmp / "litellm.yaml").write_text(litellm_config(
                model=pool.model, upstream=f"http://127.0.0.1:{sim_port}/v1"))
            litellm_process = subprocess.Popen(
                [litellm, "--config", str(tmp / "litellm.yaml"), "--port", str(litellm_port),
                 "--host", "127.0.0.1", "--num_workers", str(args.workers)],
                cwd=str(tmp), env=litellm_env(),
                stdout=(tmp / "litellm.log").open("wb"), stderr=subprocess.STDOUT,
                start_new_session=True)
            stack.callback(_stop, litellm_process)
        gateways = {"gateway": ROOT}
        if args.baseline:
            gateways["baseline"] = Path(args.baseline).resolve()
        if "direct" not in skip:
            paths.append(Target("direct", sim_port, f"Bearer {UPSTREAM_KEY}",
                               {"upstream": sim.pid}))
        for name, root in gateways.items():
            if name in skip:
                continue
            port = gateway_port if name == "gateway" else free_port()
            process = stack.enter_context(process_served(
                [sys.executable, "-m", "gateway", "--port", str(port), "--workers",
                 str(args.workers)],
                env={**env, "PYTHONPATH": str(root),
                     "SLUICE_URL": f"http://127.0.0.1:{sluice_port}",
                     "SLUICE_GATEWAY_TOKEN": gateway_token,
                     "GATEWAY_UPSTREAM_URL": f"http://127.0.0.1:{sim_port}/v1",
                     "GATEWAY_UPSTREAM_API_KEY": UPSTREAM_KEY,
                     "GATEWAY_SPOOL_PATH": str(tmp / f"usage-{name}.jsonl")},
                cwd=str(tmp), log=tmp / f"{name}.log", what=f"the {name} gateway",
                ready_url=f"http://127.0.0.1:{port}/healthz", ready_seconds=60))
            paths.append(Target(name, port, f"Bearer {api_key}",
                                {"proxy": process.pid, "Sluice": SERVER_PIDS[sluice_port],
                                 "upstream": sim.pid}))
        if litellm:
            try:
                http_wait(f"http://127.0.0.1:{litellm_port}/health/liveliness", seconds=300,
                           process=litellm_process, what="LiteLLM")
                paths.append(Target("LiteLLM", litellm_port, f"Bearer {LITELLM_MASTER_KEY}",
                                   {"proxy": litellm_process.pid, "upstream": sim.pid}))
            except RuntimeError as exc:
                log = (tmp / "litellm.log").read_text(errors="replace")[-2000:]
                litellm_missing = f"{exc}; its log ends:\n{log}"
        load.append(f"servers up: {_uptime()}")
        a: list[tuple[int, dict]] = []
        b: list[tuple[int, dict]] = []
        for n in range(1, args.rounds + 1):
            if "a" not in skip:
                a.append((n, {p.name: completions(p, args, pool.model) for p in paths}))
                load.append(f"after (a) round {n}: {_uptime()}")
            if "b" not in skip:
                b.append((n, {p.name: streams(p, args, pool.model, warm=n == 1)
                              for p in paths}))
                load.append(f"after (b) round {n}: {_uptime()}")
    report(args, a, b, litellm_missing, load)


def _stop(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, 15)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)
        process.wait()


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def report(args, a: list, b: list, litellm_missing: str, load: list[str]) -> None:
    where = (f"gateway {args.workers} process(es) and LiteLLM --num_workers {args.workers}; "
             f"Sluice {args.sluice_workers} worker(s); one simulated upstream "
             f"({args.rate:.0f} tok/s, TTFT {args.ttft_ms:.0f} ms, a write every "
             f"{args.tick_ms:g} ms)")
    rows = []
    for n, results in a:
        direct = results.get("direct")
        for name, r in results.items():
            light, peak = r["light"], r["peak"]
            rows.append([
                n, name, ok_rps(peak), peak.connections,
                f"{ok_rps(peak) / ok_rps(direct['peak']):.2f}" if direct else "-",
                f"{light.p50_ms:.2f}", f"{light.p99_ms:.2f}",
                f"{light.p50_ms - direct['light'].p50_ms:+.2f}" if direct else "-",
                f"{light.p99_ms - direct['light'].p99_ms:+.2f}" if direct else "-",
                fmt(r["admission_ms"], ".2f"), f"{peak.errors} / {light.errors}",
                " ".join(f"{k} {v:,.0f}" for k, v in r["cpu"].items())])
    if rows:
        table(f"(a) small completions ({args.completion_tokens} output tokens), wrk: successful "
              f"req/s, best of {args.connections} connections; latency at "
              f"{args.latency_connections} connections; {args.seconds:.0f} s each; {where}",
              ["round", "path", "req/s", "conns", "÷ direct", "p50 ms", "p99 ms", "added p50",
               "added p99", "of which authorize p50 ≤", "errors (sat. / light)",
               "CPU µs per request at saturation"], rows)
    rows = []
    for n, results in b:
        direct = results.get("direct")
        for name, r in results.items():
            ttft, rates = r["ttft"], r["rates"]
            rows.append([
                n, name, f"{r['complete']}/{r['started']}", r["no_token"],
                fmt(pct(ttft, 50), ".1f"), fmt(pct(ttft, 99), ".1f"),
                fmt(pct(ttft, 50) - pct(direct["ttft"], 50), "+.2f") if direct else "-",
                fmt(r["admission_ms"], ".2f"), fmt(pct(rates, 50), ".0f"),
                fmt(pct(rates, 5), ".0f"),
                fmt(min(rates or [float("nan")]), ".0f"),
                fmt(pct(rates, 5) / args.rate, ".3f"), r["tokens_per_s"],
                " ".join(f"{k} {v:,.2f}" for k, v in r["cpu"].items() if k != "Sluice")])
    if rows:
        table(f"(b) {args.streams} concurrent streams of {args.stream_tokens} tokens at "
              f"{args.rate:.0f} tok/s, {args.processes} asyncio load processes, "
              f"{args.seconds:.0f} s (streams unfinished {args.stream_grace:.0f} s later cut, "
              f"counted as delivered); {where}",
              ["round", "path", "complete", "no token", "TTFT p50 ms", "TTFT p99 ms",
               "added TTFT p50", "of which authorize p50 ≤", "tok/s p50", "tok/s p5",
               "tok/s min", "p5 ÷ rate",
               "tok/s delivered, all", "CPU µs per token"], rows)
    if litellm_missing:
        print(f"\nLiteLLM rows missing: {litellm_missing}")
    print()
    targets(args, a, b)
    for line in load:
        print(line)


def targets(args, a: list, b: list) -> None:
    """Each round's figures against the targets."""
    for n, results in a:
        direct, gateway = results.get("direct"), results.get("gateway")
        if not (direct and gateway):
            continue
        ratio = ok_rps(gateway["peak"]) / ok_rps(direct["peak"])
        added = gateway["light"].p50_ms - direct["light"].p50_ms
        print(f"round {n}: small completions {ratio:.2f}x direct req/s (target >= 0.6: "
              f"{'met' if ratio >= 0.6 else 'not met'}); added p50 at "
              f"{args.latency_connections} connections {added:+.2f} ms (target <= 1.5: "
              f"{'met' if added <= 1.5 else 'not met'})")
        if "baseline" in results:
            cpu = gateway["cpu"]["proxy"] / results["baseline"]["cpu"]["proxy"]
            print(f"round {n}: gateway CPU per request {cpu:.2f}x the baseline's")
    for n, results in b:
        direct, gateway = results.get("direct"), results.get("gateway")
        if not (direct and gateway):
            continue
        added = pct(gateway["ttft"], 50) - pct(direct["ttft"], 50)
        p5 = pct(gateway["rates"], 5)
        print(f"round {n}: {args.streams} streams: added TTFT p50 {added:+.2f} ms (target "
              f"<= 2: {'met' if added <= 2 else 'not met'}); p5 {p5:.0f} tok/s = "
              f"{p5 / args.rate:.1%} of {args.rate:.0f} (target >= 95%: "
              f"{'met' if p5 >= 0.95 * args.rate else 'not met'}); direct's p5 "
              f"{pct(direct['rates'], 5):.0f}")
        if "baseline" in results:
            cpu = gateway["cpu"]["proxy"] / results["baseline"]["cpu"]["proxy"]
            print(f"round {n}: gateway CPU per streamed token {cpu:.2f}x the baseline's "
                  f"(target <= 0.5: {'met' if cpu <= 0.5 else 'not met'})")


if __name__ == "__main__":
    main()
