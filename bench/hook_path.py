"""The files on the hook's path: which of the project's files run for one authorize decision
(and one usage call), from the served application to the Lua script and back.

    DATABASE_URL=... REDIS_URL=... python bench/hook_path.py [--root DIR]

The production application (config/asgi.py of the tree at --root, default this one) is called
in-process on an event loop; the second of two admissions is traced (the first reads the
gateway tokens and the pools), every thread included: each project file (not the virtualenv,
not tests) with a function that ran is listed, then the Lua files the script is built from.
"""

import argparse
import asyncio
import json
import os
import sys
import threading
from pathlib import Path


def _call(app, path: str, body: bytes, token: str) -> tuple[int, bytes]:
    started, parts = {}, []
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
             "root_path": "", "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 80),
             "headers": [(b"host", b"127.0.0.1"), (b"authorization", f"Bearer {token}".encode()),
                         (b"content-type", b"application/json"),
                         (b"content-length", str(len(body)).encode())]}
    sent = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive():
        if sent:
            return sent.pop()
        await asyncio.Event().wait()

    async def send(message):
        if message["type"] == "http.response.start":
            started.update(message)
        else:
            parts.append(message.get("body", b""))

    async def run():
        await app(scope, receive, send)
    asyncio.run(run())
    return started["status"], b"".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", default=str(Path(__file__).resolve().parent.parent))
    parser.add_argument("--cpu", type=int, default=0,
                        help="then this many decisions in a row: this process's CPU per one")
    args = parser.parse_args()
    root = Path(args.root).resolve()
    sys.path.insert(0, str(root))
    sys.path.insert(1, str(root / "bench"))
    os.chdir(root)
    from common import django_setup, tenant_seed

    django_setup()
    pool, _, _, api_key, token = tenant_seed()
    from config.asgi import application

    def ask(request_id: str) -> bytes:
        return json.dumps({"request_id": request_id, "api_key": api_key, "model": pool.model,
                           "input_tokens": 10, "max_output_tokens": 20}).encode()

    status, answer = _call(application, "/api/gateway/v1/authorize", ask("warm"), token)
    assert status == 200, answer
    for kind, path, body in (("authorize", "/api/gateway/v1/authorize", ask("traced")),):
        seen: set[str] = set()

        def profile(frame, event, arg, seen=seen):
            if event == "call":
                seen.add(frame.f_code.co_filename)
            return profile

        threading.setprofile(profile)
        sys.setprofile(profile)
        try:
            status, answer = _call(application, path, body, token)
        finally:
            sys.setprofile(None)
            threading.setprofile(None)
        assert status == 200, answer
        files = sorted(str(Path(f).resolve().relative_to(root)) for f in seen
                       if os.path.isabs(f) and Path(f).resolve().is_relative_to(root)
                       and ".venv" not in Path(f).parts and "bench" not in Path(f).parts)
        from quotas.limiter.schema import SCRIPTS

        lua = [f"quotas/limiter/scripts/_{p}.lua" for p in ("common", *SCRIPTS["authorize"].shared)]
        lua.append("quotas/limiter/scripts/authorize.lua")
        print(f"{kind}: {len(files)} Python files, {len(lua)} Lua files ({root})")
        for f in [*files, *lua]:
            print(f"  {f}")
    if args.cpu:
        print(f"authorize: {_cpu_per_decision(application, ask, token, args.cpu):.1f} µs of this "
              f"process's CPU per decision, in-process, {args.cpu} in a row ({root})")


def _cpu_per_decision(app, ask, token: str, n: int) -> float:
    """CPU (every thread of this process) per decision, the application called on one loop
    (no HTTP, no load generator: what other load on the machine distorts least)."""
    import time

    bodies = [ask(f"cpu-{time.time_ns()}-{i}") for i in range(n)]

    async def run():
        for body in bodies:
            started, sent = {}, [{"type": "http.request", "body": body, "more_body": False}]

            async def receive(sent=sent):
                return sent.pop()

            async def send(message, started=started):
                if message["type"] == "http.response.start":
                    started.update(message)
            await app({**_SCOPE, "headers": [*_SCOPE["headers"],
                                              (b"authorization", f"Bearer {token}".encode()),
                                              (b"content-length", str(len(body)).encode())]},
                      receive, send)
            assert started["status"] == 200, started

    loop = asyncio.new_event_loop()
    loop.run_until_complete(run())  # warm
    bodies = [ask(f"cpu-{time.time_ns()}-{i}") for i in range(n)]
    before = time.process_time()
    loop.run_until_complete(run())
    return (time.process_time() - before) * 1e6 / n


_SCOPE = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
          "scheme": "http", "path": "/api/gateway/v1/authorize",
          "raw_path": b"/api/gateway/v1/authorize", "query_string": b"", "root_path": "",
          "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 80),
          "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json")]}


if __name__ == "__main__":
    main()
