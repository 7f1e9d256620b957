"""The gateway hook's logic, independent of how the HTTP request arrived.

`authorize_steps` and `hook_call` (the other endpoints': usage, metering/api/hook.py) take the
method, the Authorization header and a reader of the body, and give (status, JSON-ready body).
Authorize is written as steps (quotas/limiter/steps.py): `authorize_call` runs them in the
calling thread, for the Django views (views.py, every hook URL) and the WSGI fast path in front
of Django (wsgi.py); the production server runs them on its event loop (asgi.py), where a
decision needs no thread.
"""

import logging
import time
from collections.abc import Callable

from django.db import InterfaceError, OperationalError

from quotas.hook import messages
from quotas.hook.fail_open import fail_open_authorize, fail_open_heartbeat_steps
from quotas.hook.gateway_tokens import GatewayIdentity, gateway_authenticate_steps
from quotas.hook.headers import ratelimit_headers
from quotas.hook.inputs import AuthorizeInput, BadInput, authorize_input, json_body
from quotas.hook.metrics import AUTHORIZE_SECONDS, DECISIONS, LIMITER_ERRORS
from quotas.hook.refusals import refusal_count, refusal_counted
from quotas.hook.reservations import reservation_id_issue
from quotas.hook.routing import (
    SERVICE_TIER_OF,
    TIERS_SERVING,
    PoolRoute,
    RouteError,
    pool_routes_steps,
)
from quotas.limiter.connection import LimiterUnavailable
from quotas.limiter.engine import (
    limiter_authorize_steps,
    limiter_lease_map_steps,
    limiter_spill_mark_steps,
)
from quotas.limiter.schema import SPILLED, TIER_MISMATCH, Decision
from quotas.limiter.steps import Background, Blocking, Steps, steps_run
from sluice.errors import error_body
from sluice.secrets import secret_digest

logger = logging.getLogger(__name__)
Answer = tuple[int, dict]


def _error(code: str, message: str, status: int, *, fields: dict | None = None) -> Answer:
    return status, error_body(code=code, message=message, fields=fields,
                              retryable=code in messages.RETRYABLE)


def _refusal(code: str, message: str, status: int, *, retry_after_ms: int | None = None,
             headers: dict | None = None) -> Answer:
    """An authorize refusal: `allowed: false`, the error, and the headers to forward, which
    always say whether the caller should retry (`x-should-retry`, honoured by the OpenAI SDK).
    """
    retryable = code in messages.RETRYABLE
    retry = {"retry_after_ms": retry_after_ms} if status in (429, 503) else {}
    headers = {**(headers or {}), "x-should-retry": "true" if retryable else "false"}
    if retry_after_ms is not None and status in (429, 503):
        headers["retry-after"] = str(max(1, -(-retry_after_ms // 1000)))
        headers["retry-after-ms"] = str(retry_after_ms)
    return status, {"allowed": False, **error_body(code=code, message=message,
                                                   retryable=retryable, **retry),
                    "headers": headers}


def hook_steps(handler, histogram, *, method: str, authorization: str,
                read_body: Callable[[], bytes]) -> Steps:
    """POST only, a valid gateway token, a JSON body: then `handler(parsed, gateway)`'s steps.
    The body is read (`read_body`, which raises BadInput when it is too large) only for a
    known gateway."""
    started = time.perf_counter()
    try:
        if method != "POST":
            return _error("method_not_allowed", "Use POST.", 405)
        gateway = yield from gateway_authenticate_steps(authorization)
        if gateway is None:
            return _error("invalid_gateway_token",
                          "A valid gateway token is required (Bearer gw_...).", 401)
        return (yield from handler(json_body(read_body()), gateway))
    except BadInput as exc:
        return _error(exc.code, exc.message, 400, fields=exc.fields)
    except (OperationalError, InterfaceError):
        # PostgreSQL unreachable: a 503, so a client keeps the usage for later instead of
        # hunting in it for an event to blame (a 500 says "failed on this request").
        logger.exception("gateway hook: %s could not reach PostgreSQL", handler.__name__)
        return _error("database_unavailable", "The database is unreachable; retry shortly.",
                      503)
    except Exception:
        # Django's handler would answer its HTML page, and the fast path none at all.
        logger.exception("gateway hook: %s failed", handler.__name__)
        return _error("internal_error", "The server failed to answer; try again.", 500)
    finally:
        histogram.observe(time.perf_counter() - started)


def authorize_steps(*, method: str, authorization: str, read_body: Callable[[], bytes]
                    ) -> Steps:
    """Authorize: every answer that admits nothing says `allowed: false`, whoever refused (the
    limiter, the input checks, the gateway token), so a gateway reads one field."""
    status, body = yield from hook_steps(_authorize_handle_steps, AUTHORIZE_SECONDS,
                                          method=method, authorization=authorization,
                                          read_body=read_body)
    return status, (body if "allowed" in body else {"allowed": False, **body})


def authorize_call(*, method: str, authorization: str, read_body: Callable[[], bytes]
                   ) -> Answer:
    return steps_run(authorize_steps(method=method, authorization=authorization,
                                     read_body=read_body))


def hook_call(handler: Callable[[object, GatewayIdentity], Answer], histogram, *, method: str,
              authorization: str, read_body: Callable[[], bytes]) -> Answer:
    """Another hook endpoint (usage: metering/api/hook.py) with authorize's checks and error
    answers around it: `handler(body, gateway)` runs in the calling thread."""
    def handler_steps(body: object, gateway: GatewayIdentity) -> Steps:
        return (yield Blocking(handler, {"body": body, "gateway": gateway}))

    handler_steps.__name__ = handler.__name__
    return steps_run(hook_steps(handler_steps, histogram, method=method,
                                 authorization=authorization, read_body=read_body))


def lease_answer(*, lease_id: str, ttl_ms: int) -> dict:
    """authorize's `lease` (docs/hook.md, Leases): a heartbeat every third of the TTL leaves
    two chances before expiry; 2-5 s keeps it cheap and the loss of a lease prompt."""
    return {"id": lease_id, "ttl_ms": ttl_ms, "heartbeat_ms": min(5000, max(2000, ttl_ms // 3))}


def _decision_answer(d: Decision, *, route: PoolRoute, reservation_id: str | None,
                     dry_run: bool, limiter: str) -> Answer:
    if d.allowed:
        status = 200
        body = {"allowed": True, "reservation_id": reservation_id,
                "org": d.org_id,
                "pool": {"id": route.pool_id, "model": route.model, "region": route.region,
                         "tier": route.tier},
                "service_tier": SERVICE_TIER_OF[route.tier],
                "reserved_tokens": d.reserved_tokens,
                "reserved_input_tokens": d.reserved_input_tokens,
                "reserved_output_tokens": d.reserved_output_tokens,
                "headers": ratelimit_headers(d)}
        if dry_run:
            body["dry_run"] = True
        elif d.lease_ttl_ms:
            body["lease"] = lease_answer(lease_id=reservation_id, ttl_ms=d.lease_ttl_ms)
    else:
        status, message = messages.REFUSALS[d.outcome]
        headers = ratelimit_headers(d) if d.tokens_limit or d.requests_limit else None
        status, body = _refusal(d.outcome, message, status, retry_after_ms=d.retry_after_ms,
                                headers=headers)
        if d.scope:  # which limit refused: the org's allocation or the key's slice, and which
            body["error"]["scope"] = d.scope
        if d.limit:
            body["error"]["limit"] = d.limit
    if limiter != "redis":
        body["limiter"] = limiter
    return status, body


# Refusals after which `auto` asks the next pool (the standard one): the fast pool is full for
# this org, or the org holds no allocation there (or is not known there yet).
SPILL_ON = frozenset({"tps_exceeded", "pool_capacity_exhausted", "no_allocation",
                      "invalid_api_key"})
# Refusals that only say "not here": reported only when no pool asked had a better reason.
NOT_HERE = frozenset({"no_allocation", "invalid_api_key"})
# API-key digest -> the key's default service tier, as the last decision about it said: `auto`
# then asks only the pools that tier allows. A hint, checked by the script on every call (a
# stale one answers TIER_MISMATCH and is corrected), so its size is bounded by clearing.
KEY_TIER_HINTS_MAX = 50_000
_key_tier_hints: dict[str, str] = {}
# API-key digest -> (org id, key id), as the last decision said: a lease's id is then signed
# before the decision, and authorize maps it in the same call (checked there; else lease_map).
_key_owners: dict[str, tuple[int, int]] = {}


def _lease_signed(ask: AuthorizeInput, digest: str, pool_id: int) -> tuple[str, str, str]:
    """(reservation_id, its signature, "<org>.<key>") of a lease request whose key's org is
    known here, else ("", "", "")."""
    owner = _key_owners.get(digest) if ask.lease_owner and not ask.dry_run else None
    if owner is None:
        return "", "", ""
    reservation_id = reservation_id_issue(pool_id=pool_id, org_id=owner[0],
                                          api_key_id=owner[1], request_id=ask.request_id)
    return reservation_id, reservation_id.rpartition("_")[2], f"{owner[0]}.{owner[1]}"


def _candidates(routes: list[PoolRoute], service_tier: str, hint: str) -> list[PoolRoute]:
    if service_tier != "auto" or hint in ("unknown", "auto"):
        return routes
    return [r for r in routes if r.tier in TIERS_SERVING[hint]]


def _limiter_decide_steps(ask: AuthorizeInput, routes: list[PoolRoute]) -> Steps:
    """Ask the pools in order until one admits or refuses for good: (decision, route,
    reservation_id made before the decision or ""), or None when no pool of a tier the key's
    default allows serves the model. Raises LimiterUnavailable (with the route it happened on
    as its argument)."""
    digest = secret_digest(ask.api_key)
    refused: list[tuple[Decision, PoolRoute]] = []
    for _ in range(2):  # a second pass only when the key's default tier turned out stale
        hint = _key_tier_hints.get(digest, "unknown")
        for route in _candidates(routes, ask.service_tier, hint):
            reservation_id, signature, signed_for = _lease_signed(ask, digest, route.pool_id)
            try:
                d = yield from limiter_authorize_steps(
                    pool_id=route.pool_id, api_key=ask.api_key, digest=digest,
                    request_id=ask.request_id, input_tokens=ask.input_tokens,
                    max_output_tokens=ask.max_output_tokens, tier=ask.service_tier,
                    key_tier=hint, pool_tier=route.tier, dry_run=ask.dry_run,
                    lease_owner=ask.lease_owner, lease_id=signature, lease_for=signed_for,
                    lease_ttl_ms=route.lease_ttl_ms)
            except LimiterUnavailable as exc:
                raise LimiterUnavailable(route) from exc
            if (ask.lease_owner and d.api_key_id
                    and _key_owners.get(digest) != (d.org_id, d.api_key_id)):
                if len(_key_owners) >= KEY_TIER_HINTS_MAX:
                    _key_owners.clear()
                _key_owners[digest] = (d.org_id, d.api_key_id)
            if d.key_tier and d.key_tier != hint:
                if len(_key_tier_hints) >= KEY_TIER_HINTS_MAX:
                    _key_tier_hints.clear()
                _key_tier_hints[digest] = d.key_tier
            if d.outcome in (TIER_MISMATCH, SPILLED):
                continue
            if d.allowed:
                if refused:
                    yield from _spills_mark_steps(refused, ask, d)
                return d, route, reservation_id
            refused.append((d, route))
            if ask.service_tier != "auto" or d.outcome not in SPILL_ON:
                break
        else:
            if not refused and _key_tier_hints.get(digest, "unknown") != hint:
                continue  # every pool asked answered from a stale hint: ask again
        break
    # The first pool's refusal: a refusal in the standard pool is an afterthought, unless the
    # org holds nothing in the fast one.
    for d, route in refused:
        if d.outcome not in NOT_HERE:
            return d, route, ""
    return (*refused[0], "") if refused else None


def _spills_mark_steps(refused: list[tuple[Decision, PoolRoute]], ask: AuthorizeInput,
                       d: Decision) -> Steps:
    """A request the fast pool refused for capacity and the standard one admitted: a retry of
    it must find its reservation in the standard pool, not be admitted by the fast one too."""
    if ask.dry_run:
        return
    for refusal, route in refused:
        if refusal.outcome in ("tps_exceeded", "pool_capacity_exhausted"):
            try:
                yield from limiter_spill_mark_steps(pool_id=route.pool_id,
                                                    request_id=ask.request_id, org_id=d.org_id)
            except LimiterUnavailable:
                logger.warning("could not mark %s as spilled in pool %s", ask.request_id,
                               route.pool_id)


_decision_counters: dict = {}


def _decisions_counted(outcome: str, limiter: str):
    """The decisions counter of (outcome, limiter), looked up once: labels() takes a lock and
    builds a key on every call."""
    counter = _decision_counters.get((outcome, limiter))
    if counter is None:
        counter = _decision_counters[(outcome, limiter)] = DECISIONS.labels(outcome, limiter)
    return counter


def _authorize_handle_steps(body: object, gateway: GatewayIdentity) -> Steps:
    ask = authorize_input(body)
    try:
        routes = yield from pool_routes_steps(model=ask.model, region=ask.region,
                                              service_tier=ask.service_tier)
    except RouteError as exc:
        if exc.code == "unknown_model":
            return _refusal(exc.code, exc.message, 404)
        return _error(exc.code, exc.message, 400)
    limiter = "redis"
    try:
        decided = yield from _limiter_decide_steps(ask, routes)
        if decided is None:
            return _refusal("unknown_model", f"No pool serves model {ask.model!r} on the API "
                            "key's default service tier.", 404)
        decision, route, reservation_id = decided
    except LimiterUnavailable as exc:
        # Redis could not decide (down, too slow, read-only, out of memory, or the pool could
        # not be rebuilt): the pool's policy answers. fail_closed refuses (nobody exceeds a
        # limit, nobody gets served); fail_open admits under this process's share of the
        # org's guaranteed rate (service over exactness), unless PostgreSQL is down too.
        route = exc.args[0]
        policy = "fail_open" if route.fail_open else "fail_closed"
        LIMITER_ERRORS.labels(policy).inc()
        decision, reservation_id = None, ""
        if route.fail_open:
            decision = yield Blocking(_fail_open_decide, {"ask": ask, "route": route})
        if decision is None:
            _decisions_counted("limiter_unavailable", policy).inc()
            return _refusal("limiter_unavailable", messages.LIMITER_UNAVAILABLE, 503,
                            retry_after_ms=messages.LIMITER_UNAVAILABLE_RETRY_MS)
        limiter = "fail_open"
    else:
        yield from fail_open_heartbeat_steps()
    _decisions_counted(decision.outcome, limiter).inc()
    if refusal_counted(decision=decision, limiter=limiter):  # off the decision's path
        yield Background(refusal_count, {"decision": decision, "pool_id": route.pool_id,
                                         "limiter": limiter})
    if decision.allowed and not ask.dry_run:
        reservation_id = reservation_id or reservation_id_issue(
            pool_id=route.pool_id, org_id=decision.org_id, api_key_id=decision.api_key_id,
            request_id=ask.request_id)
        if decision.lease_ttl_ms and not decision.lease_mapped:
            yield from _lease_map_steps(route.pool_id, ask.request_id, reservation_id)
    return _decision_answer(decision, route=route, reservation_id=reservation_id or None,
                            dry_run=ask.dry_run, limiter=limiter)


def _lease_map_steps(pool_id: int, request_id: str, reservation_id: str) -> Steps:
    """Map a lease's id where authorize could not: once per API key and process."""
    try:
        yield from limiter_lease_map_steps(pool_id=pool_id, request_id=request_id,
                                           signature=reservation_id.rpartition("_")[2])
    except LimiterUnavailable:
        # Admitted all the same: its heartbeats answer unknown_lease, it expires after the
        # TTL (billed from no progress), and its usage event replaces that.
        logger.warning("lease %s of pool %s could not be mapped", request_id, pool_id)


def authorize_handle(body: object, gateway: GatewayIdentity) -> Answer:
    """Authorize's decision for a parsed body, in this thread (the benchmarks, tests)."""
    return steps_run(_authorize_handle_steps(body, gateway))


def _fail_open_decide(ask: AuthorizeInput, route: PoolRoute) -> Decision | None:
    """The local decision of a fail_open pool; None when it cannot be made either."""
    output = ask.max_output_tokens or route.output_estimate_default
    try:
        decision = fail_open_authorize(pool_id=route.pool_id, api_key=ask.api_key,
                                       cost=ask.input_tokens + output)
    except LimiterUnavailable:
        return None
    if decision.allowed:
        decision = decision._replace(reserved_input_tokens=ask.input_tokens,
                                     reserved_output_tokens=output)
    return decision
