"""POST /api/gateway/v1/leases/heartbeat and /leases/release (docs/hook.md, Leases): a gateway
process renews the leases it holds, with the output tokens each has delivered, and releases
those whose streams ended. Served with the hook's checks and error answers (quotas/hook/),
like usage: what a lease reports is delivery in flight, the checkpoint an expired lease is
billed from (metering/leases.py); the limiter keeps it (quotas/limiter/scripts/lease_update.lua).

Each id names the pool it was issued in, so the leases are grouped by pool and each pool's
are renewed (or released) in one script call: the cost grows with the leases named, never with
all leases. Every lease is answered alone; a malformed body is refused whole, nothing written.
"""

import time
from collections import defaultdict
from typing import NamedTuple

from django.urls import path
from drf_spectacular.utils import OpenApiExample, extend_schema
from prometheus_client import Histogram
from rest_framework import serializers

from quotas.hook import messages, schema
from quotas.hook.asgi import Answer
from quotas.hook.gateway_tokens import GatewayIdentity
from quotas.hook.hook import hook_answer
from quotas.hook.inputs import GATEWAY_PROCESS, MAX_TOKENS, BadInput, json_body
from quotas.hook.metrics import LATENCY_BUCKETS
from quotas.hook.reservations import reservation_id_fields
from quotas.limiter.connection import LimiterUnavailable
from quotas.limiter.engine import LeaseNamed, limiter_leases_update
from quotas.limiter.schema import RENEWED, LeaseAnswer
from sluice.errors import error_body
from sluice.openapi import Error

MAX_LEASES = 1000  # named in one call
LEASE_SECONDS = Histogram("sluice_lease_update_seconds",
                          "Lease heartbeat and release handling time.", ["call"],
                          buckets=LATENCY_BUCKETS)

LEASE_MESSAGES = {
    "unknown_lease": "No lease has this id here: never admitted as a lease, already settled, "
                     "or its id was altered.",
    "lease_expired": "The lease expired before this call (no heartbeat within its TTL): it is "
                     "billed from its last progress; its usage event, if sent, replaces that.",
    "lease_not_yours": "Another gateway process holds this lease.",
    "progress_backwards": "delivered_output_tokens is below what this lease reported before.",
    "progress_beyond_reservation": "delivered_output_tokens exceeds the request's "
                                   "max_output_tokens.",
}


class LeaseInput(NamedTuple):
    id: str  # its reservation_id
    delivered_output_tokens: int


def leases_input(body: object) -> tuple[str, list[LeaseInput]]:
    """A heartbeat's or release's body: the gateway process and 1 to MAX_LEASES leases, all
    well-formed, else BadInput naming every malformed field. (An unknown lease is answered
    per lease.)"""
    if type(body) is not dict:
        raise BadInput("The body must be a JSON object.", code="malformed_request")
    errors: dict = {}
    process, items = body.get("gateway_process"), body.get("leases")
    if type(process) is not str or GATEWAY_PROCESS.fullmatch(process) is None:
        errors["gateway_process"] = ["Must be 1-64 characters of A-Z a-z 0-9 . _ : -"]
    if type(items) is not list or not 1 <= len(items) <= MAX_LEASES:
        errors["leases"] = [f"Must be a list of 1 to {MAX_LEASES} leases."]
        items = []
    leases, bad = [], {}
    for index, item in enumerate(items):
        lease_id = item.get("id") if type(item) is dict else None
        progress = item.get("delivered_output_tokens") if type(item) is dict else None
        if (type(lease_id) is not str or not 0 < len(lease_id) <= 128
                or type(progress) is not int or not 0 <= progress <= MAX_TOKENS):
            bad[str(index)] = {"non_field_errors": [
                "Must be {\"id\": a lease id, \"delivered_output_tokens\": an integer from 0 "
                f"to {MAX_TOKENS}}}."]}
        else:
            leases.append(LeaseInput(lease_id, progress))
    if bad:
        errors["leases"] = bad
    if errors:
        raise BadInput("The request is invalid.", fields=errors)
    return process, leases


def _answer(lease_id: str, answer: LeaseAnswer) -> dict:
    if answer.status == RENEWED:
        return {"id": lease_id, "status": RENEWED, "ttl_ms": answer.ttl_ms}
    if answer.status in LEASE_MESSAGES:
        return {"id": lease_id, "status": "refused", "code": answer.status,
                "message": LEASE_MESSAGES[answer.status]}
    return {"id": lease_id, "status": answer.status}


async def leases_update(body: object, gateway: GatewayIdentity, *, release: bool) -> Answer:
    """A heartbeat's (release False) or a release's answer: (status, body)."""
    process, leases = leases_input(body)
    by_pool: dict[int, list[tuple[int, LeaseNamed]]] = defaultdict(list)
    answers: list[dict | None] = [None] * len(leases)
    for index, lease in enumerate(leases):
        fields = reservation_id_fields(lease.id)
        if fields is None:
            answers[index] = _answer(lease.id, LeaseAnswer("unknown_lease"))
            continue
        pool, org, key, signature = fields
        by_pool[int(pool)].append((index, LeaseNamed(signature, int(org), int(key or 0),
                                                     lease.delivered_output_tokens)))
    for pool_id, named in by_pool.items():
        try:
            replies = await limiter_leases_update(
                pool_id=pool_id, owner=process, release=release,
                leases=[lease for _, lease in named])
        except LimiterUnavailable:
            # Retryable as a whole: renewing or releasing a lease twice answers the same.
            return 503, error_body(code="limiter_unavailable", retryable=True,
                                   message="The admission engine is unreachable; retry shortly.",
                                   retry_after_ms=messages.LIMITER_UNAVAILABLE_RETRY_MS)
        for (index, _), reply in zip(named, replies, strict=True):
            answers[index] = _answer(leases[index].id, reply)
    return 200, {"leases": answers}


async def _heartbeat_handle(raw: bytes, gateway: GatewayIdentity) -> Answer:
    return await leases_update(json_body(raw), gateway, release=False)


async def _release_handle(raw: bytes, gateway: GatewayIdentity) -> Answer:
    return await leases_update(json_body(raw), gateway, release=True)


async def leases_ridden_release(body: object, gateway: GatewayIdentity) -> Answer:
    """The releases riding on a batched authorize (its `releases`, config/asgi.py), answered
    as POST leases/release answers them; timed as the call "ridden"."""
    started = time.perf_counter()
    try:
        return await leases_update(body, gateway, release=True)
    finally:
        LEASE_SECONDS.labels("ridden").observe(time.perf_counter() - started)


async def lease_heartbeat(authorization: str, raw: bytes) -> Answer:
    """POST leases/heartbeat, on the event loop (config/asgi.py's route table)."""
    return await hook_answer(_heartbeat_handle, LEASE_SECONDS.labels("heartbeat"),
                             authorization, raw)


async def lease_release(authorization: str, raw: bytes) -> Answer:
    """POST leases/release."""
    return await hook_answer(_release_handle, LEASE_SECONDS.labels("release"), authorization,
                             raw)


class LeaseProgress(serializers.Serializer):
    id = serializers.CharField(max_length=128, help_text="The lease's id (authorize's "
                                                         "lease.id, its reservation_id).")
    delivered_output_tokens = serializers.IntegerField(
        min_value=0, max_value=MAX_TOKENS,
        help_text="Output tokens delivered to the client so far: the checkpoint an expired "
                  "lease is billed from. Never below the last one reported, never above the "
                  "request's max_output_tokens.")


class Leases(serializers.Serializer):
    gateway_process = serializers.RegexField(GATEWAY_PROCESS, max_length=64,
                                             help_text="The process that holds the leases.")
    leases = LeaseProgress(many=True, help_text=f"1 to {MAX_LEASES} leases, of any pools.")


class LeaseResult(serializers.Serializer):
    id = serializers.CharField()
    status = serializers.ChoiceField(choices=["renewed", "released", "refused"])
    ttl_ms = serializers.IntegerField(required=False, help_text="renewed: it lives this long "
                                                                "from now.")
    code = serializers.ChoiceField(
        choices=["unknown_lease", "lease_expired", "lease_not_yours", "progress_backwards",
                 "progress_beyond_reservation"], required=False,
        help_text="refused: why. Nothing is written for a refused lease; stop naming it. "
                  "lease_expired: it is (or will be within seconds) billed from its last "
                  "progress as interrupted; its usage event, sent as usual, replaces that.")
    message = serializers.CharField(required=False)


class LeasesResponse(serializers.Serializer):
    leases = LeaseResult(many=True, help_text="One per lease named, in order: a lease is "
                                              "answered alone, never failing the others.")


_LEASE_EXAMPLE = OpenApiExample("request", request_only=True, value={
    "gateway_process": "9f1c2d0e4b6a4f0c8e1d2b3a4c5d6e7f",
    "leases": [{"id": "rsv_3_17_42_0a1b2c3d4e5f60718293", "delivered_output_tokens": 812}]})


class LeaseHeartbeatSchema(schema.HookSchemaView):
    @extend_schema(
        operation_id="gateway_lease_heartbeat", tags=["gateway"],
        summary="Renew a gateway process's leases, with their progress",
        description="One call per gateway process every heartbeat_ms renews every lease it "
                    "holds (one Redis script call per pool). A malformed body is a 400 "
                    "(invalid_input) and writes nothing; 503 limiter_unavailable: retry.",
        request=Leases, responses={200: LeasesResponse, 400: Error, 401: Error, 503: Error},
        examples=[_LEASE_EXAMPLE],
    )
    def post(self, request):
        raise NotImplementedError("served by lease_heartbeat (config/asgi.py)")


class LeaseReleaseSchema(schema.HookSchemaView):
    @extend_schema(
        operation_id="gateway_lease_release", tags=["gateway"],
        summary="Release leases whose streams ended: their slots free at once",
        description="Send it when a stream ends (done, cancelled, upstream error), apart from "
                    "the usage batch: the concurrency slot frees at once and the final "
                    "progress is recorded; the tokens settle when the usage event arrives. "
                    "Releasing twice answers released again.",
        request=Leases, responses={200: LeasesResponse, 400: Error, 401: Error, 503: Error},
        examples=[_LEASE_EXAMPLE],
    )
    def post(self, request):
        raise NotImplementedError("served by lease_release (config/asgi.py)")


# For the OpenAPI description only (config/urls.py): config/asgi.py serves them.
urlpatterns = [
    path("leases/heartbeat", schema.schema_only(LeaseHeartbeatSchema), name="lease_heartbeat"),
    path("leases/release", schema.schema_only(LeaseReleaseSchema), name="lease_release"),
]
