"""A WSGI fast path for the gateway hook, POST /api/gateway/v1/authorize and /usage (and the
leases' heartbeat and release: metering/api/leases.py), in front of the Django application.

Authorize runs before every inference request, and usage after it (one event per call, from a
gateway that does not batch). Served here they skip Django's request and response objects and
its middleware (sessions, auth, CSRF, messages: none of which the hook uses), about a third of
a decision's CPU and a fifth of a one-event usage call's. What the hook needs from the
middleware is kept: the Host check against ALLOWED_HOSTS, the body size limit, `nosniff`, and
database connection hygiene (`database_hygiene`). Every other request goes to Django, and the
same logic is reachable through the Django views (quotas.hook.views, metering.api.hook).

The production server decides authorize on its event loop before a request reaches this
application (quotas/hook/asgi.py, with the same steps and the same checks, which it takes
from here); here it is served for the usage hook, and for authorize under a WSGI server
(`bench/authorize_http.py --server gunicorn`).
"""

from http import HTTPStatus

import orjson
from django.conf import settings
from django.db import connections
from django.http.request import split_domain_port, validate_host

from quotas.hook.hook import authorize_call
from quotas.hook.inputs import body_read
from sluice.errors import error_body

AUTHORIZE_PATH = "/api/gateway/v1/authorize"
USAGE_PATH = "/api/gateway/v1/usage"


def hook_reply(body: dict) -> tuple[bytes, list[tuple[str, str]]]:
    """A hook answer's bytes and headers (the ASGI adapter, asgi.py, sends the same)."""
    data = orjson.dumps(body)
    return data, [("Content-Type", "application/json"), ("Content-Length", str(len(data))),
                  ("X-Content-Type-Options", "nosniff")]


def _reply(start_response, status: int, body: dict):
    data, headers = hook_reply(body)
    start_response(f"{status} {HTTPStatus(status).phrase}", headers)
    return [data]


def host_refusal(host: str) -> tuple[int, dict] | None:
    """The refusal of a request whose Host is not in ALLOWED_HOSTS, or None. Remembered per
    Host value (a gateway sends the same one every time; the check costs ~9 µs)."""
    refusal = _host_refusals.get(host, _UNKNOWN)
    if refusal is _UNKNOWN:
        domain, _ = split_domain_port(host)
        refusal = None
        if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
            refusal = 400, error_body(code="bad_host", message=f"Host {host!r} not allowed.")
        if len(_host_refusals) >= HOSTS_REMEMBERED:  # callers choose it: bound the memory
            _host_refusals.clear()
        _host_refusals[host] = refusal
    return refusal


HOSTS_REMEMBERED = 1_000
_UNKNOWN = object()
_host_refusals: dict[str, tuple[int, dict] | None] = {}


def host_refusals_forget() -> None:
    """ALLOWED_HOSTS changed (tests' settings fixture): check every Host again."""
    _host_refusals.clear()


def hook_fast_path(django_app, *, usage_call, calls: dict | None = None):
    """`django_app` with authorize and usage (`usage_call`: metering's) answered in front of
    it, and `calls` (path -> call: metering's leases)."""
    # Path -> the hook's call, and what its refusals carry besides the error (authorize's every
    # answer that admits nothing says `allowed: false`).
    hooks = {AUTHORIZE_PATH: (authorize_call, {"allowed": False}), USAGE_PATH: (usage_call, {}),
             **{route: (call, {}) for route, call in (calls or {}).items()}}

    def application(environ, start_response):
        hook = hooks.get(environ.get("PATH_INFO"))
        if hook is None or environ.get("REQUEST_METHOD") != "POST":
            return django_app(environ, start_response)
        call, refused = hook
        refusal = host_refusal(environ.get("HTTP_HOST") or environ.get("SERVER_NAME", ""))
        if refusal is not None:
            status, error = refusal
            return _reply(start_response, status, {**refused, **error})
        try:
            status, answer = call(
                method="POST", authorization=environ.get("HTTP_AUTHORIZATION", ""),
                read_body=lambda: body_read(environ,
                                            limit=settings.DATA_UPLOAD_MAX_MEMORY_SIZE))
        finally:
            database_hygiene()
        return _reply(start_response, status, answer)
    return application


def database_hygiene() -> None:
    """What Django's request signals do for the database (which a decision touches only to
    rebuild a pool, fail open or reload routes; usage, always): close a connection that is
    broken or past its CONN_MAX_AGE, and have the next request's first query check the
    connection's health. After each call, which is before the next one: the signals' other
    receivers (caches, URLconf, query log) have nothing to do here, and sending them cost about
    a sixth of a decision's CPU."""
    for conn in connections.all(initialized_only=True):
        if not conn.in_atomic_block:  # only a test's transaction spans requests
            conn.close_if_unusable_or_obsolete()
