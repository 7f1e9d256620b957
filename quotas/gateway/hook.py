"""The gateway hook's logic, independent of how the HTTP request arrived.

`hook_call` takes the method, the Authorization header and the raw body, and returns
(status, JSON-ready body). Two thin adapters serve it: the Django views (views.py, every hook
URL) and, for authorize, a WSGI fast path in front of Django (wsgi.py) that skips Django's
request/response objects and middleware — about a third of the CPU of a decision.
"""

import contextlib
import time

from quotas.gateway import messages
from quotas.gateway.fail_open import fail_open_authorize, fail_open_heartbeat
from quotas.gateway.headers import ratelimit_headers
from quotas.gateway.inputs import BadInput, authorize_input, json_body, usage_input
from quotas.gateway.metrics import DECISIONS, LIMITER_ERRORS, USAGE_EVENTS
from quotas.gateway.reservations import reservation_id_issue
from quotas.gateway.routing import RouteError, pool_route
from quotas.gateway.tokens import GatewayIdentity, gateway_authenticate
from quotas.limiter.connection import LimiterUnavailable
from quotas.limiter.engine import limiter_authorize
from quotas.limiter.schema import Decision
from quotas.refusals import refusal_count
from quotas.usage import usage_record
from sluice.error_format import error_body

Answer = tuple[int, dict]


def _error(code: str, message: str, status: int, *, fields: dict | None = None) -> Answer:
    return status, error_body(code=code, message=message, fields=fields)


def hook_call(handler, histogram, *, method: str, authorization: str, body: bytes) -> Answer:
    """POST only, a valid gateway token, a JSON body: then `handler(parsed, gateway)`."""
    started = time.perf_counter()
    try:
        if method != "POST":
            return _error("method_not_allowed", "Use POST.", 405)
        gateway = gateway_authenticate(authorization)
        if gateway is None:
            return _error("invalid_gateway_token",
                          "A valid gateway token is required (Bearer gw_...).", 401)
        return handler(json_body(body), gateway)
    except BadInput as exc:
        return _error(exc.code, exc.message, 400, fields=exc.fields)
    finally:
        histogram.observe(time.perf_counter() - started)


def _decision_answer(d: Decision, *, pool_id: int, request_id: str, dry_run: bool,
                     limiter: str) -> Answer:
    if d.allowed:
        status = 200
        body = {"allowed": True, "reservation_id": None if dry_run else reservation_id_issue(
                    pool_id=pool_id, org_id=d.org_id, api_key_id=d.api_key_id,
                    request_id=request_id),
                "org": d.org_id, "reserved_tokens": d.reserved_tokens,
                "headers": ratelimit_headers(d)}
        if dry_run:
            body["dry_run"] = True
    else:
        status, message = messages.REFUSALS[d.outcome]
        retry = {"retry_after_ms": d.retry_after_ms} if status == 429 else {}
        body = {"allowed": False, **error_body(code=d.outcome, message=message, **retry)}
        if d.tokens_limit or d.requests_limit:
            body["headers"] = ratelimit_headers(d)
    if limiter != "redis":
        body["limiter"] = limiter
    return status, body


def authorize_handle(body: object, gateway: GatewayIdentity) -> Answer:
    ask = authorize_input(body)
    try:
        route = pool_route(model=ask.model, region=ask.region)
    except RouteError as exc:
        return _error(exc.code, exc.message, 404 if exc.code == "unknown_model" else 400)
    limiter = "redis"
    try:
        decision = limiter_authorize(
            pool_id=route.pool_id, api_key=ask.api_key, request_id=ask.request_id,
            input_tokens=ask.input_tokens, max_output_tokens=ask.max_output_tokens,
            dry_run=ask.dry_run)
    except LimiterUnavailable:
        # Redis could not decide (down, too slow, read-only, out of memory, or the pool could
        # not be rebuilt): the pool's policy answers. fail_closed refuses (nobody exceeds a
        # limit, nobody gets served); fail_open admits under this process's share of the
        # org's guaranteed rate (service over exactness), unless PostgreSQL is down too.
        policy = "fail_open" if route.fail_open else "fail_closed"
        LIMITER_ERRORS.labels(policy).inc()
        decision = None
        if route.fail_open:
            limiter = "fail_open"
            with contextlib.suppress(LimiterUnavailable):
                decision = fail_open_authorize(pool_id=route.pool_id, api_key=ask.api_key,
                                               cost=ask.input_tokens + ask.max_output_tokens)
        if decision is None:
            DECISIONS.labels("limiter_unavailable", policy).inc()
            return _error("limiter_unavailable", messages.LIMITER_UNAVAILABLE, 503)
    else:
        fail_open_heartbeat()
    DECISIONS.labels(decision.outcome, limiter).inc()
    refusal_count(decision=decision, pool_id=route.pool_id, limiter=limiter)
    return _decision_answer(decision, pool_id=route.pool_id, request_id=ask.request_id,
                            dry_run=ask.dry_run, limiter=limiter)


def usage_handle(body: object, gateway: GatewayIdentity) -> Answer:
    results = usage_record(events=usage_input(body))
    counts = {"recorded": 0, "duplicate": 0, "rejected": 0}
    out = []
    for r in results:
        counts[r.result] += 1
        item = {"request_id": r.request_id, "result": r.result}
        if r.error_code:
            item.update(error_body(code=r.error_code, message=r.error_message))
        out.append(item)
    for result, n in counts.items():
        if n:
            USAGE_EVENTS.labels(result).inc(n)
    return 200, {"results": out, "recorded": counts["recorded"],
                 "duplicates": counts["duplicate"], "rejected": counts["rejected"]}
