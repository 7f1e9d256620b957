"""The gateway hook: POST /api/gateway/v1/authorize and /usage.

Lean Django views, not DRF: authorize runs before every inference request, and DRF's
negotiation, parsers and serializers would cost more than the Redis round trip itself. The
contract is still documented in OpenAPI by the schema-only views in quotas/gateway/schema.py.
"""

import json
import time
from functools import wraps

from django.http import HttpResponse
from django.views.decorators.csrf import csrf_exempt

from quotas.gateway import messages
from quotas.gateway.fail_open import fail_open_authorize
from quotas.gateway.headers import ratelimit_headers
from quotas.gateway.inputs import BadInput, authorize_input, json_body, usage_input
from quotas.gateway.metrics import (
    AUTHORIZE_SECONDS,
    DECISIONS,
    LIMITER_ERRORS,
    USAGE_EVENTS,
    USAGE_SECONDS,
)
from quotas.gateway.reservations import reservation_id_issue
from quotas.gateway.routing import RouteError, pool_route
from quotas.gateway.tokens import gateway_authenticate
from quotas.limiter.connection import LimiterUnavailable
from quotas.limiter.engine import Decision, limiter_authorize
from quotas.usage import usage_record


def _json(body: dict, status: int = 200) -> HttpResponse:
    return HttpResponse(json.dumps(body, separators=(",", ":")), status=status,
                        content_type="application/json")


def _error(code: str, message: str, status: int, **extra) -> HttpResponse:
    error = {"code": code, "message": message}
    error.update(extra)
    return _json({"error": error}, status)


def hook_view(histogram):
    """POST only, a valid gateway token, a JSON body: then the view gets the parsed body."""
    def decorate(view):
        @csrf_exempt
        @wraps(view)
        def wrapper(request):
            started = time.perf_counter()
            try:
                if request.method != "POST":
                    return _error("method_not_allowed", "Use POST.", 405)
                gateway = gateway_authenticate(request.META.get("HTTP_AUTHORIZATION", ""))
                if gateway is None:
                    return _error("invalid_gateway_token",
                                  "A valid gateway token is required (Bearer gw_...).", 401)
                return view(request, json_body(request.body), gateway)
            except BadInput as exc:
                extra = {"fields": exc.fields} if exc.fields else {}
                return _error(exc.code, exc.message, 400, **extra)
            finally:
                histogram.observe(time.perf_counter() - started)
        return wrapper
    return decorate


def _decision_response(d: Decision, *, pool_id: int, request_id: str, dry_run: bool,
                       limiter: str) -> HttpResponse:
    if d.allowed:
        body = {"allowed": True, "reservation_id": None if dry_run else reservation_id_issue(
                    pool_id=pool_id, org_id=d.org_id, api_key_id=d.api_key_id,
                    request_id=request_id),
                "org": d.org_id, "reserved_tokens": d.reserved_tokens,
                "headers": ratelimit_headers(d)}
        if dry_run:
            body["dry_run"] = True
    else:
        status, message = messages.REFUSALS[d.outcome]
        error = {"code": d.outcome, "message": message}
        if status == 429:
            error["retry_after_ms"] = d.retry_after_ms
        body = {"allowed": False, "error": error}
        if d.tokens_limit or d.requests_limit:
            body["headers"] = ratelimit_headers(d)
    if limiter != "redis":
        body["limiter"] = limiter
    return _json(body, 200 if d.allowed else status)


@hook_view(AUTHORIZE_SECONDS)
def authorize(request, body, gateway):
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
        # The pool's policy decides: fail_closed refuses (nobody exceeds a limit, nobody gets
        # served), fail_open admits under a per-process local limit (service over exactness).
        policy = "fail_open" if route.fail_open else "fail_closed"
        LIMITER_ERRORS.labels(policy).inc()
        if not route.fail_open:
            DECISIONS.labels("limiter_unavailable", policy).inc()
            return _error("limiter_unavailable", messages.LIMITER_UNAVAILABLE, 503)
        limiter = "fail_open"
        decision = fail_open_authorize(pool_id=route.pool_id, api_key=ask.api_key,
                                       cost=ask.input_tokens + ask.max_output_tokens)
    DECISIONS.labels(decision.outcome, limiter).inc()
    return _decision_response(decision, pool_id=route.pool_id, request_id=ask.request_id,
                              dry_run=ask.dry_run, limiter=limiter)


@hook_view(USAGE_SECONDS)
def usage(request, body, gateway):
    results = usage_record(events=usage_input(body))
    counts = {"recorded": 0, "duplicate": 0, "rejected": 0}
    out = []
    for r in results:
        counts[r.result] += 1
        item = {"request_id": r.request_id, "result": r.result}
        if r.error_code:
            item["error"] = {"code": r.error_code, "message": r.error_message}
        out.append(item)
    for result, n in counts.items():
        if n:
            USAGE_EVENTS.labels(result).inc(n)
    return _json({"results": out, "recorded": counts["recorded"],
                  "duplicates": counts["duplicate"], "rejected": counts["rejected"]})
