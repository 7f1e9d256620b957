"""Leases on the hook: POST /api/gateway/v1/leases/heartbeat and /leases/release
(docs/hook.md, "Leases").

A gateway process names its leases by id (the reservation_id authorize returned) with the
output tokens each has delivered. Each id names the pool it was issued in, so the leases are
grouped by pool and each pool's are renewed (or released) in one script call
(quotas/limiter/scripts/lease_update.lua): the cost grows with the leases named, never with all
leases. Every lease is answered alone; a malformed body is refused whole, nothing written.
"""

import re
from collections import defaultdict

from quotas.hook import messages
from quotas.hook.gateway_tokens import GatewayIdentity
from quotas.hook.inputs import leases_input
from quotas.limiter.connection import LimiterUnavailable
from quotas.limiter.engine import LeaseNamed, limiter_leases_update_steps
from quotas.limiter.schema import RENEWED, LeaseAnswer
from quotas.limiter.steps import Steps
from sluice.errors import error_body

# What a reservation_id is made of (quotas/hook/reservations.py): pool, org, key, signature.
_LEASE_ID = re.compile(r"^rsv_(\d{1,18})_(\d{1,18})_(\d{0,18})_([0-9a-f]{20})$")
# A heartbeat every third of the TTL leaves two chances before expiry; 2-5 s keeps a gateway's
# heartbeat cheap on both sides and its loss of a lease prompt.
HEARTBEAT_MIN_MS, HEARTBEAT_MAX_MS = 2000, 5000

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


def lease_answer(*, lease_id: str, ttl_ms: int) -> dict:
    """authorize's `lease` object."""
    return {"id": lease_id, "ttl_ms": ttl_ms,
            "heartbeat_ms": min(HEARTBEAT_MAX_MS, max(HEARTBEAT_MIN_MS, ttl_ms // 3))}


def _answer(lease_id: str, answer: LeaseAnswer) -> dict:
    if answer.status == RENEWED:
        return {"id": lease_id, "status": RENEWED, "ttl_ms": answer.ttl_ms}
    if answer.status in LEASE_MESSAGES:
        return {"id": lease_id, "status": "refused", "code": answer.status,
                "message": LEASE_MESSAGES[answer.status]}
    return {"id": lease_id, "status": answer.status}


def leases_update_steps(body: object, gateway: GatewayIdentity, *, release: bool) -> Steps:
    """A heartbeat's (release False) or a release's answer: (status, body)."""
    process, leases = leases_input(body)
    by_pool: dict[int, list[tuple[int, LeaseNamed]]] = defaultdict(list)
    answers: list[dict | None] = [None] * len(leases)
    unknown = LeaseAnswer("unknown_lease")
    for index, lease in enumerate(leases):
        match = _LEASE_ID.match(lease.id)
        if match is None:
            answers[index] = _answer(lease.id, unknown)
            continue
        pool, org, key, signature = match.groups()
        by_pool[int(pool)].append((index, LeaseNamed(signature, int(org), int(key or 0),
                                                     lease.delivered_output_tokens)))
    for pool_id, named in by_pool.items():
        try:
            replies = yield from limiter_leases_update_steps(
                pool_id=pool_id, owner=process, release=release,
                leases=[lease for _, lease in named])
        except LimiterUnavailable:
            # Retryable as a whole: renewing or releasing a lease twice answers the same.
            return 503, error_body(code="limiter_unavailable",
                                   message=messages.LIMITER_UNAVAILABLE.replace(
                                       "this pool fails closed; ", ""),
                                   retryable=True,
                                   retry_after_ms=messages.LIMITER_UNAVAILABLE_RETRY_MS)
        for (index, _), reply in zip(named, replies, strict=True):
            answers[index] = _answer(leases[index].id, reply)
    return 200, {"leases": answers}


def lease_heartbeat_steps(body: object, gateway: GatewayIdentity) -> Steps:
    return (yield from leases_update_steps(body, gateway, release=False))


def lease_release_steps(body: object, gateway: GatewayIdentity) -> Steps:
    return (yield from leases_update_steps(body, gateway, release=True))
