"""The production WSGI application plus one empty JSON endpoint at the same layer as the
authorize fast path (/bench/empty): the ceiling of this server and load generator for a
request that does no work. Benchmarks only."""

from config.wsgi import application as sluice

EMPTY = b"{}"


def application(environ, start_response):
    if environ.get("PATH_INFO") == "/bench/empty":
        start_response("200 OK", [("Content-Type", "application/json"),
                                  ("Content-Length", str(len(EMPTY)))])
        return [EMPTY]
    return sluice(environ, start_response)
