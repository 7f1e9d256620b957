"""The production ASGI application plus one empty JSON endpoint at the same layer as the hook's
ASGI entry (/bench/empty): the ceiling of this server and load generator for a request that
does no work. Benchmarks only."""

from config.asgi import application as sluice

EMPTY = b"{}"
_HEADERS = [(b"content-type", b"application/json"), (b"content-length", b"2")]


async def application(scope, receive, send):
    if scope["type"] == "http" and scope["path"] == "/bench/empty":
        await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
        await send({"type": "http.response.body", "body": EMPTY})
        return None
    return await sluice(scope, receive, send)
