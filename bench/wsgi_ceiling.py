"""Django's WSGI application plus the benchmark endpoint of the bare WSGI layer: /bench/empty,
an empty JSON answer, served where Django's requests are (behind the ASGI bridge's threads):
the ceiling of this server and load generator for a request that does no work, and the
yardstick of authorize's ratio. Benchmarks only."""

from config.wsgi import application as sluice

EMPTY = b"{}"
HEADERS = [("Content-Type", "application/json"), ("Content-Length", str(len(EMPTY)))]


def application(environ, start_response):
    if environ.get("PATH_INFO") == "/bench/empty":
        start_response("200 OK", HEADERS)
        return [EMPTY]
    return sluice(environ, start_response)
