"""Benchmark: the CPU one request costs in the ASGI layer, Starlette's routing against the
gateway's plain dispatch (gateway/asgi.py), without the network or the server.

    python bench/gateway_asgi.py [--requests 50000]

The same endpoint (a POST whose JSON body is read and answered with a small JSON body) is
called through each layer with in-memory receive/send, so the difference is the layer itself:
Starlette's Router, middleware stack (ServerErrorMiddleware, ExceptionMiddleware), Request
and Response objects, against a dict lookup, `gateway.asgi.Request` and `Answer`. Both layers
are alternated in rounds; the table gives µs of CPU per request.
"""

import argparse
import asyncio
import sys
import time
from pathlib import Path

import orjson
from asgi_scope import asgi_post_scope

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from starlette.applications import Starlette  # noqa: E402
from starlette.requests import Request as StarletteRequest  # noqa: E402
from starlette.responses import Response  # noqa: E402
from starlette.routing import Route  # noqa: E402

from gateway.asgi import Request, json_answer  # noqa: E402

BODY = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hello"}]})
ANSWER = {"id": "x", "object": "chat.completion", "choices": []}
SCOPE = asgi_post_scope("/v1/chat/completions", BODY, key="sk_x")


def starlette_app():
    async def chat(request: StarletteRequest) -> Response:
        body = orjson.loads(await request.body())
        assert request.headers["authorization"] and body["model"]
        return Response(orjson.dumps(ANSWER), media_type="application/json")

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"]),
                             Route("/v1/responses", chat, methods=["POST"]),
                             Route("/v1/models", chat, methods=["GET"])])


def plain_app():
    async def chat(request: Request):
        body = orjson.loads(await request.body(limit=2 ** 20))
        assert request.headers["authorization"] and body["model"]
        return json_answer(ANSWER)

    routes = {"/v1/chat/completions": ("POST", chat), "/v1/responses": ("POST", chat),
              "/v1/models": ("GET", chat)}

    async def app(scope, receive, send):
        method, handler = routes[scope["path"]]
        assert scope["method"] == method
        answer = await handler(Request(scope, receive))
        await answer(scope, receive, send)

    return app


async def calls(app, n: int) -> float:
    async def receive():
        return {"type": "http.request", "body": BODY, "more_body": False}

    sent = []

    async def send(message):
        sent.append(message)

    started = time.process_time()
    for _ in range(n):
        await app(dict(SCOPE), receive, send)
    elapsed = time.process_time() - started
    assert sent[-1]["type"] == "http.response.body" and b"chat.completion" in sent[-1]["body"]
    return 1e6 * elapsed / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    apps = {"Starlette": starlette_app(), "plain ASGI": plain_app()}
    results: dict[str, list[float]] = {name: [] for name in apps}
    for _ in range(args.rounds):
        for name, app in apps.items():
            results[name].append(asyncio.run(calls(app, args.requests)))
    print(f"\nASGI layer, CPU µs per request ({args.requests:,} requests, {args.rounds} rounds "
          f"alternated, best round)")
    print("| layer | µs per request | rounds |")
    print("|---|---|---|")
    for name, values in results.items():
        print(f"| {name} | {min(values):.1f} | {' '.join(f'{v:.1f}' for v in values)} |")


if __name__ == "__main__":
    main()
