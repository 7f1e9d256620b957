"""The gateway hook's handlers, served on the event loop by quotas/hook/asgi.py.

A handler takes the Authorization header and the body, and gives (status, JSON-ready body).
`authorize` decides on the loop: the scripts awaited on the loop's Redis link
(quotas/limiter/aio.py), and only what may block (a pool rebuilt from PostgreSQL, a fail-open
decision, the gateway tokens or the pools read for the first time) in a thread. `hook_handler`
makes the handler of an endpoint whose work runs in a thread (usage: metering/api/hook.py),
with authorize's checks and error answers around it.
"""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import NamedTuple

from django.db import InterfaceError, OperationalError

from quotas.hook import messages
from quotas.hook.asgi import CLIENT_GONE, Answer, Handler
from quotas.hook.fail_open import fail_open_authorize, fail_open_heartbeat
from quotas.hook.gateway_tokens import GatewayIdentity, gateway_authenticate_async
from quotas.hook.headers import ratelimit_headers, tokens_refill_tps
from quotas.hook.inputs import (
    AuthorizeInput,
    BadInput,
    authorize_batch_input,
    authorize_input,
    json_body,
)
from quotas.hook.metrics import (
    AUTHORIZE_BATCH_SECONDS,
    AUTHORIZE_SECONDS,
    DECISIONS,
    LIMITER_ERRORS,
)
from quotas.hook.refusals import refusal_count, refusal_counted
from quotas.hook.reservations import SIGNATURE_LENGTH, reservation_id_issue
from quotas.hook.routing import (
    SERVICE_TIER_OF,
    TIERS_SERVING,
    PoolRoute,
    RouteError,
    pool_routes,
)
from quotas.limiter.aio import background, in_thread
from quotas.limiter.connection import LimiterUnavailable
from quotas.limiter.engine import limiter_authorize, limiter_lease_map, limiter_spill_mark
from quotas.limiter.schema import SPILLED, TIER_MISMATCH, Decision
from sluice.errors import error_body
from sluice.secrets import secret_digest

logger = logging.getLogger(__name__)


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


async def hook_answer(handle: Callable[[bytes, GatewayIdentity], Awaitable[Answer]], histogram,
                      authorization: str, raw: bytes) -> Answer:
    """A valid gateway token, then `await handle(raw, gateway)`; every failure answered in the
    one error shape, and the time taken observed in `histogram`. What each handler of the
    server's route table (config/asgi.py) runs inside."""
    started = time.perf_counter()
    try:
        gateway = await gateway_authenticate_async(authorization)
        if gateway is None:
            return _error("invalid_gateway_token",
                          "A valid gateway token is required (Bearer gw_...).", 401)
        return await _answered(handle, raw, gateway)
    finally:
        histogram.observe(time.perf_counter() - started)


async def _answered(handle, payload, gateway: GatewayIdentity) -> Answer:
    """`await handle(payload, gateway)`, every failure answered in the one error shape."""
    try:
        return await handle(payload, gateway)
    except BadInput as exc:
        return _error(exc.code, exc.message, 400, fields=exc.fields)
    except (OperationalError, InterfaceError):
        # PostgreSQL unreachable: a 503, so a client keeps the usage for later instead of
        # hunting in it for an event to blame (a 500 says "failed on this request").
        logger.exception("gateway hook: %s could not reach PostgreSQL", handle.__name__)
        return _error("database_unavailable", "The database is unreachable; retry shortly.",
                      503)
    except Exception:
        logger.exception("gateway hook: %s failed", handle.__name__)
        return _error("internal_error", "The server failed to answer; try again.", 500)


async def _authorize_raw(raw: bytes, gateway: GatewayIdentity) -> Answer:
    return await authorize_handle(json_body(raw), gateway)


async def authorize(authorization: str, raw: bytes) -> Answer:
    """POST /api/gateway/v1/authorize. Every answer that admits nothing says `allowed: false`,
    whoever refused (the limiter, the input checks, the gateway token), so a gateway reads one
    field."""
    return _says_allowed(
        await hook_answer(_authorize_raw, AUTHORIZE_SECONDS, authorization, raw))


authorize.refused = {"allowed": False}  # what the server's own refusals (405, 413) add


def _says_allowed(answer: Answer) -> Answer:
    status, body = answer
    return status, (body if "allowed" in body else {"allowed": False, **body})


async def authorize_batch(authorization: str, raw: bytes) -> Answer:
    """POST /api/gateway/v1/authorize/batch: `{"requests": [authorize body, ...]}` (1 to
    AUTHORIZE_BATCH_MAX), answered `{"results": [{"status", "body"}, ...]}` in their order, each
    exactly what /authorize answers that body (docs/hook.md, Batched authorize). One call and
    one answer for the requests a gateway has in hand at once: the HTTP exchange, most of an
    authorize's cost on the server, is shared. `"releases"`, optional, is a leases/release
    body applied before the requests are decided, answered in `"releases"` as leases/release
    answers it. A gateway token or a batch that is not a list is refused whole (its status,
    `allowed: false`)."""
    return _says_allowed(
        await hook_answer(_authorize_batch_raw, AUTHORIZE_BATCH_SECONDS, authorization, raw))


authorize_batch.refused = {"allowed": False}


async def _authorize_batch_raw(raw: bytes, gateway: GatewayIdentity) -> Answer:
    body = json_body(raw)
    requests = authorize_batch_input(body)
    released = None
    if body.get("releases") is not None and _releases is not None:
        # The gateway's queued lease releases, riding along: applied first, so the slots they
        # free are free for the requests of the same batch.
        released = await _answered(_releases, body["releases"], gateway)
    answers = await asyncio.gather(*(_authorize_one(item, gateway) for item in requests))
    answer = {"results": [{"status": status, "body": decided} for status, decided in answers]}
    if released is not None:
        answer["releases"] = {"status": released[0], "body": released[1]}
    return 200, answer


# What applies a batch's `releases` (a POST leases/release body): metering's, set by the served
# application (config/asgi.py). None: a batch's releases are not read.
_releases: Callable[[object, GatewayIdentity], Awaitable[Answer]] | None = None


def authorize_releases_set(releases: Callable[[object, GatewayIdentity], Awaitable[Answer]]
                           | None) -> None:
    global _releases
    _releases = releases


async def _authorize_one(body: object, gateway: GatewayIdentity) -> Answer:
    """One request of a batch, answered and observed as /authorize answers it."""
    started = time.perf_counter()
    try:
        return _says_allowed(await _answered(authorize_handle, body, gateway))
    finally:
        AUTHORIZE_SECONDS.observe(time.perf_counter() - started)


def hook_handler(handle: Callable[[object, GatewayIdentity], Answer], histogram) -> Handler:
    """The handler of an endpoint whose work may block (usage: metering/api/hook.py):
    `handle(body, gateway)` runs in a thread, the body parsed there too."""
    def parsed(raw: bytes, gateway: GatewayIdentity) -> Answer:
        return handle(json_body(raw), gateway)

    async def in_a_thread(raw: bytes, gateway: GatewayIdentity) -> Answer:
        return await in_thread(parsed, raw=raw, gateway=gateway)

    in_a_thread.__name__ = handle.__name__

    async def handler(authorization: str, raw: bytes) -> Answer:
        return await hook_answer(in_a_thread, histogram, authorization, raw)

    handler.__name__ = handler.__qualname__ = handle.__name__.removesuffix("_handle")
    return handler


def lease_heartbeat_ms(ttl_ms: int) -> int:
    """The heartbeat interval authorize's `lease` advises (docs/hook.md, Leases): every third
    of the TTL leaves two chances before expiry; 2-5 s keeps it cheap and the loss of a lease
    prompt."""
    return min(5000, max(2000, ttl_ms // 3))


def _decision_answer(d: Decision, *, route: PoolRoute, reservation_id: str | None,
                     dry_run: bool, limiter: str, queued=None) -> Answer:
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
                "headers": ratelimit_headers(d), "tokens_refill_tps": tokens_refill_tps(d)}
        if dry_run:
            body["dry_run"] = True
        elif d.lease_ttl_ms:
            ttl_ms = d.lease_ttl_ms
            body["lease"] = {"id": reservation_id, "ttl_ms": ttl_ms,
                             "heartbeat_ms": lease_heartbeat_ms(ttl_ms)}
    else:
        status, message = messages.REFUSALS[d.outcome]
        headers = ratelimit_headers(d) if d.tokens_limit or d.requests_limit else None
        status, body = _refusal(d.outcome, message, status, retry_after_ms=d.retry_after_ms,
                                headers=headers)
        if headers:
            body["tokens_refill_tps"] = tokens_refill_tps(d)
        if d.scope:  # which limit refused: the org's allocation or the key's slice, and which
            body["error"]["scope"] = d.scope
        if d.limit:
            body["error"]["limit"] = d.limit
    if limiter != "redis":
        body["limiter"] = limiter
    if queued is not None:  # it could have waited (admission/): what it was told
        _queue_answer(body, queued)
    return status, body


def _queue_answer(body: dict, queued) -> None:
    """The admission queue's part of an answer (queued: admission's QueueOutcome): the budget
    used, how long it waited, and on a refusal the ETA (`retry_after_ms` too, and headers)."""
    body["queue_budget_ms"] = queued.budget_ms
    headers = body["headers"] if body.get("headers") is not None else {}
    if queued.queued_ms is not None:
        body["queued_ms"] = queued.queued_ms
        headers["x-sluice-queued-ms"] = str(queued.queued_ms)
    if not body["allowed"] and queued.eta_ms is not None:
        body["error"]["queue_eta_ms"] = queued.eta_ms
        headers["x-sluice-queue-eta-ms"] = str(queued.eta_ms)
    body["headers"] = headers


# The admission queue (admission/hook.py), handed over by config/asgi.py (quotas cannot import
# admission): `await queue(gone=, pool_id=, ...)` decides a request that may wait. None: none
# waits (every decision is authorize's, at once).
_queue: Callable[..., Awaitable] | None = None


def authorize_queue_set(queue: Callable[..., Awaitable] | None) -> None:
    global _queue
    _queue = queue


# Refusals after which `auto` asks the next pool (the standard one): the fast pool is full for
# this org, or the org holds no allocation there (or is not known there yet).
SPILL_ON = frozenset({"tps_exceeded", "pool_capacity_exhausted", "no_allocation",
                      "invalid_api_key", "queue_full"})
# Refusals that only say "not here": reported only when no pool asked had a better reason.
NOT_HERE = frozenset({"no_allocation", "invalid_api_key"})
# API-key digest -> the key's default service tier, as the last decision about it said: `auto`
# then asks only the pools that tier allows. A hint, checked by the script on every call (a
# stale one answers TIER_MISMATCH and is corrected), so its size is bounded by clearing.
PER_KEY_MAX = 50_000  # entries in each per-key map of this module
_key_tier_hints: dict[str, str] = {}


class _KeyOwner(NamedTuple):
    org_id: int
    api_key_id: int
    signed_for: str  # "<org>.<key>", as authorize.lua compares it: built once per key


# API-key digest -> its owner, as the last decision said: a lease's id is then signed before
# the decision, and authorize maps it in the same call (checked there; else lease_map).
_key_owners: dict[str, _KeyOwner] = {}
_NOT_SIGNED = ("", "", "")


def _lease_signed(ask: AuthorizeInput, digest: str, pool_id: int) -> tuple[str, str, str]:
    """(reservation_id, its signature, "<org>.<key>") of a lease request whose key's org is
    known here, else ("", "", "")."""
    owner = _key_owners.get(digest) if ask.lease_owner and not ask.dry_run else None
    if owner is None:
        return _NOT_SIGNED
    reservation_id = reservation_id_issue(pool_id=pool_id, org_id=owner.org_id,
                                          api_key_id=owner.api_key_id,
                                          request_id=ask.request_id)
    return reservation_id, reservation_id[-SIGNATURE_LENGTH:], owner.signed_for


def _remember(per_key: dict, digest: str, value) -> None:
    """Put `value` in a per-process map by API-key digest, bounded by clearing it when full."""
    if len(per_key) >= PER_KEY_MAX:
        per_key.clear()
    per_key[digest] = value


def _candidates(routes: list[PoolRoute], service_tier: str, hint: str) -> list[PoolRoute]:
    if service_tier != "auto" or hint in ("unknown", "auto"):
        return routes
    return [r for r in routes if r.tier in TIERS_SERVING[hint]]


async def _decide(ask: AuthorizeInput, route: PoolRoute, digest: str, hint: str,
                  waits: dict, signature: str, signed_for: str) -> Decision:
    """One pool's decision: the admission queue's where the pool has one and the request may
    wait (its budget, or its key's or org's default), else authorize's. `waits`: route ->
    what the queue said."""
    if _queue is not None and route.queue_max_wait_ms and ask.queue_threshold_ms \
            and not ask.dry_run:
        queued = await _queue(
            gone=CLIENT_GONE.get(), pool_id=route.pool_id, digest=digest,
            request_id=ask.request_id, input_tokens=ask.input_tokens,
            max_output_tokens=ask.max_output_tokens, tier=ask.service_tier, key_tier=hint,
            pool_tier=route.tier, budget_ms=ask.queue_threshold_ms,
            max_wait_ms=route.queue_max_wait_ms, speed_floor_tps=route.speed_floor_output_tps,
            ttft_ceiling_ms=route.ttft_ceiling_ms, lease_owner=ask.lease_owner,
            lease_id=signature, lease_for=signed_for, lease_ttl_ms=route.lease_ttl_ms)
        waits[route] = queued
        return queued.decision
    return await limiter_authorize(
        pool_id=route.pool_id, api_key=ask.api_key, digest=digest,
        request_id=ask.request_id, input_tokens=ask.input_tokens,
        max_output_tokens=ask.max_output_tokens, tier=ask.service_tier,
        key_tier=hint, pool_tier=route.tier, dry_run=ask.dry_run, lease_owner=ask.lease_owner,
        lease_id=signature, lease_for=signed_for, lease_ttl_ms=route.lease_ttl_ms)


async def _limiter_decide(ask: AuthorizeInput, routes: list[PoolRoute], waits: dict
                          ) -> tuple[Decision, PoolRoute, str] | None:
    """Ask the pools in order until one admits or refuses for good: (decision, route,
    reservation_id made before the decision or ""), or None when no pool of a tier the key's
    default allows serves the model. Raises LimiterUnavailable (with the route it happened on
    as its argument). `waits`: route -> what its admission queue said."""
    digest = secret_digest(ask.api_key)
    refused: list[tuple[Decision, PoolRoute]] = []
    for _ in range(2):  # a second pass only when the key's default tier turned out stale
        hint = _key_tier_hints.get(digest, "unknown")
        for route in _candidates(routes, ask.service_tier, hint):
            reservation_id, signature, signed_for = _lease_signed(ask, digest, route.pool_id)
            try:
                d = await _decide(ask, route, digest, hint, waits, signature, signed_for)
            except LimiterUnavailable as exc:
                raise LimiterUnavailable(route) from exc
            if ask.lease_owner and d.api_key_id and not d.lease_mapped:
                # Its id could not be mapped (not signed, or for another owner): the key's next
                # leases are signed before the decision.
                _remember(_key_owners, digest, _KeyOwner(d.org_id, d.api_key_id,
                                                         f"{d.org_id}.{d.api_key_id}"))
            if d.key_tier and d.key_tier != hint:
                _remember(_key_tier_hints, digest, d.key_tier)
            if d.outcome in (TIER_MISMATCH, SPILLED):
                continue
            if d.allowed:
                if refused:
                    await _spills_mark(refused, ask, d)
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


async def _spills_mark(refused: list[tuple[Decision, PoolRoute]], ask: AuthorizeInput,
                      d: Decision) -> None:
    """A request the fast pool refused for capacity and the standard one admitted: a retry of
    it must find its reservation in the standard pool, not be admitted by the fast one too."""
    if ask.dry_run:
        return
    for refusal, route in refused:
        if refusal.outcome in ("tps_exceeded", "pool_capacity_exhausted"):
            try:
                await limiter_spill_mark(pool_id=route.pool_id, request_id=ask.request_id,
                                         org_id=d.org_id)
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


async def authorize_handle(body: object, gateway: GatewayIdentity) -> Answer:
    """Authorize's decision for a parsed body."""
    ask = authorize_input(body)
    try:
        routes = await pool_routes(model=ask.model, region=ask.region,
                                   service_tier=ask.service_tier)
    except RouteError as exc:
        if exc.code == "unknown_model":
            return _refusal(exc.code, exc.message, 404)
        return _error(exc.code, exc.message, 400)
    limiter = "redis"
    waits: dict = {}  # pool route -> what its admission queue said
    try:
        decided = await _limiter_decide(ask, routes, waits)
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
            decision = await in_thread(_fail_open_decide, ask=ask, route=route)
        if decision is None:
            _decisions_counted("limiter_unavailable", policy).inc()
            return _refusal("limiter_unavailable", messages.LIMITER_UNAVAILABLE, 503,
                            retry_after_ms=messages.LIMITER_UNAVAILABLE_RETRY_MS)
        limiter = "fail_open"
    else:
        fail_open_heartbeat()
    _decisions_counted(decision.outcome, limiter).inc()
    if refusal_counted(decision=decision, limiter=limiter):  # off the decision's path
        background(refusal_count, decision=decision, pool_id=route.pool_id, limiter=limiter)
    if decision.allowed and not ask.dry_run:
        reservation_id = reservation_id or reservation_id_issue(
            pool_id=route.pool_id, org_id=decision.org_id, api_key_id=decision.api_key_id,
            request_id=ask.request_id)
        if decision.lease_ttl_ms and not decision.lease_mapped:
            await _lease_map(route.pool_id, ask.request_id, reservation_id)
    return _decision_answer(decision, route=route, reservation_id=reservation_id or None,
                            dry_run=ask.dry_run, limiter=limiter, queued=waits.get(route))


async def _lease_map(pool_id: int, request_id: str, reservation_id: str) -> None:
    """Map a lease's id where authorize could not: once per API key and process."""
    try:
        await limiter_lease_map(pool_id=pool_id, request_id=request_id,
                                signature=reservation_id[-SIGNATURE_LENGTH:])
    except LimiterUnavailable:
        # Admitted all the same: its heartbeats answer unknown_lease, it expires after the
        # TTL (billed from no progress), and its usage event replaces that.
        logger.warning("lease %s of pool %s could not be mapped", request_id, pool_id)


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
