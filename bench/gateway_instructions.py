"""Benchmark: instructions the reference gateway's own code runs per small completion, counted
by callgrind.

    python bench/gateway_instructions.py [--baseline CHECKOUT] [--requests 2000]

CPU µs per request (gateway.py) move by ±10 % between rounds on a shared 2-core VM; the
instructions a process executes do not depend on the load, so this is how a change to the
gateway's per-request code is compared. The application runs in one process, as
`python -m gateway` serves it (its factory, so its garbage-collector settings too), called
through ASGI with in-memory receive/send; Sluice's authorize answer and the upstream's are
canned (`AsyncSluiceClient._send` and `Gateway._upstream_send` replaced). What is counted is
a request's own path through the application and the asyncio client; not uvicorn, the kernel,
the HTTP client, nor the background sends (usage batches, lease releases), whose cost per
request depends on the rate: docs/gateway.md (Speed) says what those cost. Each checkout runs
twice under `valgrind --tool=callgrind`, with 300 and with 300 + --requests requests; the
difference over --requests is its count. `--baseline` is another checkout with the same two
seams. Needs valgrind.
"""

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from asgi_scope import asgi_post_scope

ROOT = Path(__file__).resolve().parent.parent
WARM = 300
AUTHORIZE = (b'{"allowed":true,"reservation_id":"res_0123456789abcdef","org":7,'
             b'"reserved_tokens":300,"headers":{"x-ratelimit-limit-requests":"1000000",'
             b'"x-ratelimit-remaining-requests":"999999","x-ratelimit-reset-requests":"0s",'
             b'"x-ratelimit-limit-tokens":"10000000000","x-ratelimit-remaining-tokens":'
             b'"9999999700","x-ratelimit-reset-tokens":"1ms"},"limiter":"redis","pool":{"id":3,'
             b'"model":"m1","region":"local","tier":"fast"},"service_tier":"priority",'
             b'"reserved_input_tokens":20,"reserved_output_tokens":280,'
             b'"tokens_refill_tps":1000000000,"lease":{"id":"res_0123456789abcdef",'
             b'"ttl_ms":15000,"heartbeat_ms":5000}}')
ANSWER = (b'{"id":"chatcmpl-x","object":"chat.completion","created":1,"model":"m1","choices":'
          b'[{"index":0,"message":{"role":"assistant","content":"Hello there, how are you"},'
          b'"finish_reason":"stop"}],"usage":{"prompt_tokens":14,"completion_tokens":8,'
          b'"total_tokens":22},"service_tier":"priority"}')
BODY = (b'{"model":"m1","max_tokens":8,"messages":[{"role":"user",'
        b'"content":"Say hello in a few words."}]}')
SCOPE = asgi_post_scope("/v1/chat/completions", BODY, key="sk_bench_key")


class CannedUpstream:
    status = 200
    headers = {"content-type": "application/json"}

    async def read(self) -> bytes:
        return ANSWER

    def release(self) -> None:
        pass


async def serve(requests: int) -> None:
    """The child: the application as `python -m gateway` builds it, `requests` requests."""
    # bench/gateway.py would shadow the gateway package: import it from PYTHONPATH.
    sys.path.remove(str(Path(__file__).resolve().parent))
    from sluice_client.aio import Reply

    import gateway.__main__ as served

    factory = getattr(served, "served_app", None)
    if factory is None:  # a checkout whose uvicorn factory is gateway.app:create_app
        from gateway.app import create_app as factory
    app = factory()
    await app.startup()

    async def sluice_answer(method, path, data=b"", **kwargs):
        if path.endswith("/authorize"):
            return Reply(200, AUTHORIZE)
        return Reply(200, b'{"leases":[]}' if "/leases/" in path else b'{"results":[]}')

    async def upstream_answer(upstream, path, body, attempt):
        return CannedUpstream()

    app.sluice._send = sluice_answer
    app._upstream_send = upstream_answer

    async def receive():
        return {"type": "http.request", "body": BODY, "more_body": False}

    async def send(message):
        pass

    for _ in range(requests):
        await app(SCOPE, receive, send)
    app.sluice._pending.clear()  # nothing to deliver: the process ends here


def instructions(checkout: Path, requests: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "PYTHONPATH": f"{checkout}:{checkout / 'clients/python/src'}",
               "SLUICE_URL": "http://127.0.0.1:9", "SLUICE_GATEWAY_TOKEN": "gw_bench",
               "GATEWAY_UPSTREAM_URL": "http://127.0.0.1:9/v1",
               "GATEWAY_SPOOL_PATH": f"{tmp}/usage.jsonl", "GATEWAY_USAGE_FLUSH_INTERVAL": "3600"}
        done = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/out",
             sys.executable, __file__, "--serve", str(requests)],
            env=env, cwd=tmp, capture_output=True, text=True, check=True)
    return int(re.search(r"Collected : (\d+)", done.stderr).group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--baseline", help="another checkout to count too")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        asyncio.run(serve(args.serve))
        return
    checkouts = {"gateway": ROOT}
    if args.baseline:
        checkouts["baseline"] = Path(args.baseline).resolve()
    counts = {name: (instructions(path, WARM + args.requests) - instructions(path, WARM))
              / args.requests for name, path in checkouts.items()}
    for name, count in counts.items():
        ratio = f" ({count / counts['gateway']:.2f}x this code's)" if name != "gateway" else ""
        print(f"{name}: {count:,.0f} instructions per small completion{ratio}")


if __name__ == "__main__":
    main()
