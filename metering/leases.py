"""The sweep of expired leases (docs/hook.md, Leases): what a dead gateway streamed is billed.

Every second (Celery beat, `metering.tasks.leases_sweep`) each pool's due leases are claimed
from Redis by expiry time (quotas/limiter/scripts/lease_expire.lua: a range of a sorted set,
never a scan of every lease) and each is recorded as a usage event with status `interrupted`:
output tokens = its last progress checkpoint, input tokens = its reservation's input, started
when it was admitted and finished at its last checkpoint, no first token (no timings: never
premium-eligible). Then its reservation is settled with those figures, which frees its slot
and returns its unused share of every bucket.

A claim is not a removal: a sweep that dies between the claim and its commit leaves the lease
to be claimed again LEASE_CLAIM_MS later, and recording it again is idempotent (request_id).
A real usage event for the same request, sooner or later, replaces the interrupted record
(metering/usage.py): never billed twice, never lost.
"""

import logging
from datetime import UTC, datetime

from metering.models import UsageStatus
from metering.usage import usage_record_attributed
from quotas.hook.inputs import UsageInput
from quotas.hook.reservations import ReservationRef
from quotas.hook.routing import pool_routes_all
from quotas.limiter.connection import LimiterUnavailable
from quotas.limiter.engine import limiter_leases_expire
from quotas.limiter.schema import ExpiredLease

logger = logging.getLogger(__name__)

# Leases claimed per pool and call: a sweep second of a fleet's mass failure is a few calls.
CLAIM_BATCH = 500


def from_epoch_ms(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def _interrupted(lease: ExpiredLease) -> UsageInput:
    started = from_epoch_ms(lease.started_ms)
    return UsageInput(request_id=lease.request_id, reservation_id=None,
                      input_tokens=lease.input_tokens, output_tokens=lease.output_tokens,
                      status=UsageStatus.INTERRUPTED, started_at=started, first_token_at=None,
                      finished_at=from_epoch_ms(max(lease.progress_ms, lease.started_ms)))


def leases_interrupted_record(*, pool_id: int, leases: list[ExpiredLease]) -> int:
    """Record claimed leases of one pool as interrupted usage and settle them: how many were
    recorded (one already recorded, or replaced by its real event, is only settled)."""
    events, refs = [], {}
    for lease in leases:
        if lease.started_ms <= 0:  # a record without its start: nothing to date it by
            logger.warning("lease %s of pool %s has no start; not billed", lease.request_id,
                           pool_id)
            continue
        events.append(_interrupted(lease))
        refs[lease.request_id] = ReservationRef(pool_id, lease.org_id, lease.api_key_id or None)
    inserted, rejected = usage_record_attributed(events=events, refs=refs)
    for result in rejected:
        logger.warning("lease %s of pool %s not billed: %s", result.request_id, pool_id,
                       result.error_message)
    return len(inserted)


def leases_sweep(*, limit: int = CLAIM_BATCH) -> int:
    """Claim every pool's due leases and bill them: how many were recorded."""
    recorded = 0
    for route in pool_routes_all():
        while True:
            try:
                leases = limiter_leases_expire(pool_id=route.pool_id, limit=limit)
            except LimiterUnavailable as exc:
                # The leases stay due in Redis (or went with it: docs/faults.md).
                logger.warning("leases of pool %s not swept: %s", route.pool_id, exc)
                break
            if leases:
                recorded += leases_interrupted_record(pool_id=route.pool_id, leases=leases)
            if len(leases) < limit:
                break
    return recorded
