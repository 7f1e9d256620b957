"""The production WSGI application plus two benchmark endpoints at the same layer as the
authorize fast path: /bench/empty, an empty JSON answer (the ceiling of this server and load
generator for a request that does no work), and /bench/ping, the same answer after one Redis
round trip (PING on the limiter's own per-thread connection: what the thread gives up while it
waits for Redis, without any of authorize's work). Benchmarks only."""

from config.wsgi import application as sluice

EMPTY = b"{}"
HEADERS = [("Content-Type", "application/json"), ("Content-Length", str(len(EMPTY)))]


def _ping() -> None:
    from quotas.limiter.connection import _hot_connection, limiter_client

    conn = _hot_connection(limiter_client().connection_pool)
    conn.send_command("PING", check_health=False)
    conn.read_response()


def application(environ, start_response):
    path = environ.get("PATH_INFO")
    if path == "/bench/empty":
        start_response("200 OK", HEADERS)
        return [EMPTY]
    if path == "/bench/ping":
        _ping()
        start_response("200 OK", HEADERS)
        return [EMPTY]
    return sluice(environ, start_response)
