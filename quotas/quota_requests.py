"""Quota-increase requests: an org asks, an operator (or the pool's auto-approval rule) decides.

Approval is `allocation_change` / `allocation_grant`, so it takes the pool lock and the capacity
check like every other path that raises a guarantee: two approvals racing for the last free
tokens/s cannot both succeed.
"""

from django.db import IntegrityError, transaction
from django.utils import timezone

from orgs.models import Organization, OrgStatus
from orgs.services.audit import Actor, audit_record
from quotas.models import (
    Allocation,
    AllocationStatus,
    CapacityPool,
    PoolAdmission,
    QuotaRequest,
    QuotaRequestStatus,
)
from quotas.selectors import pool_guaranteed_tps
from quotas.services import allocation_change, allocation_grant, pool_lock
from sluice.errors import Conflict, DomainError
from sluice.transactions import nestable

AUTO_APPROVER = "auto:quota_headroom"


def _snapshot(r: QuotaRequest) -> dict:
    return {"status": r.status, "guaranteed_tps": r.guaranteed_tps, "burst_tps": r.burst_tps,
            "daily_tokens": r.daily_tokens, "max_concurrency": r.max_concurrency}


def _current(org_id: int, pool_id: int) -> Allocation | None:
    return Allocation.objects.filter(org_id=org_id, pool_id=pool_id,
                                     status=AllocationStatus.ACTIVE).first()


def _auto_approvable(request: QuotaRequest) -> bool:
    limit = (PoolAdmission.objects.filter(pool_id=request.pool_id)
             .values_list("quota_auto_approve_max_tps", flat=True).first()) or 0
    current = _current(request.org_id, request.pool_id)
    increase = request.guaranteed_tps - (current.guaranteed_tps if current else 0)
    if limit == 0 or increase > limit:
        return False
    pool = request.pool
    return pool_guaranteed_tps(pool=pool) + max(increase, 0) <= pool.guaranteeable_tps


@transaction.atomic(durable=True)
def quota_request_create(*, org: Organization, pool: CapacityPool, guaranteed_tps: int,
                         burst_tps: int, daily_tokens: int, max_concurrency: int, reason: str,
                         actor: Actor) -> QuotaRequest:
    if org.status != OrgStatus.ACTIVE:
        raise Conflict("Only active organizations can ask for more quota.",
                       code="org_not_active")
    if burst_tps < guaranteed_tps:
        raise DomainError("burst_tps must be at least guaranteed_tps.", code="invalid_input",
                          fields={"burst_tps": ["Must be at least guaranteed_tps."]})
    try:
        with transaction.atomic():
            request = QuotaRequest.objects.create(
                org=org, pool=pool, guaranteed_tps=guaranteed_tps, burst_tps=burst_tps,
                daily_tokens=daily_tokens, max_concurrency=max_concurrency, reason=reason,
                requested_by=None if isinstance(actor, str) else actor)
    except IntegrityError:
        raise Conflict("There is already a pending request for this pool; cancel it first.",
                       code="quota_request_pending") from None
    audit_record(actor=actor, action="quota_request.create", target=request, org=org,
                 after=_snapshot(request), reason=reason)
    if _auto_approvable(request):
        return quota_request_approve.nested(request=request, actor=AUTO_APPROVER,
                                            reason="within the pool's auto-approval headroom")
    return request


def _lock_pending(request: QuotaRequest) -> QuotaRequest:
    request = QuotaRequest.objects.select_for_update(of=("self",)).select_related(
        "pool", "org").get(pk=request.pk)
    if request.status != QuotaRequestStatus.PENDING:
        raise Conflict(f"This request is already {request.status}.",
                       code="quota_request_decided")
    return request


def _decide(request: QuotaRequest, *, status: str, actor: Actor, reason: str) -> QuotaRequest:
    before = _snapshot(request)
    request.status = status
    request.decided_by = actor if isinstance(actor, str) else actor.get_username()
    request.decision_reason = reason
    request.decided_at = timezone.now()
    request.save(update_fields=["status", "decided_by", "decision_reason", "decided_at"])
    audit_record(actor=actor, action=f"quota_request.{status}", target=request,
                 org=request.org, before=before, after=_snapshot(request), reason=reason)
    return request


@nestable
@transaction.atomic(durable=True)
def quota_request_approve(*, request: QuotaRequest, actor: Actor,
                          reason: str = "") -> QuotaRequest:
    """Raises CapacityExhausted (422) when the pool cannot guarantee it; the request stays
    pending so an operator can free capacity and try again."""
    # The house lock order (quotas/services.py): the pool and the org before the request.
    pool_lock(pool_id=request.pool_id)
    Organization.objects.select_for_update().get(pk=request.org_id)
    request = _lock_pending(request)
    limits = {"guaranteed_tps": request.guaranteed_tps, "burst_tps": request.burst_tps,
              "daily_tokens": request.daily_tokens, "max_concurrency": request.max_concurrency}
    current = _current(request.org_id, request.pool_id)
    why = f"quota request #{request.pk}"
    if current is None:
        allocation_grant.nested(org=request.org, pool=request.pool, actor=actor, reason=why,
                                **limits)
    else:
        allocation_change.nested(allocation=current, actor=actor, reason=why, **limits)
    return _decide(request, status=QuotaRequestStatus.APPROVED, actor=actor, reason=reason)


@transaction.atomic(durable=True)
def quota_request_deny(*, request: QuotaRequest, actor: Actor, reason: str) -> QuotaRequest:
    if not reason.strip():
        raise DomainError("Say why the request is denied; the organization sees it.",
                          code="reason_required")
    request = _lock_pending(request)
    return _decide(request, status=QuotaRequestStatus.DENIED, actor=actor, reason=reason)


@transaction.atomic(durable=True)
def quota_request_cancel(*, request: QuotaRequest, actor: Actor) -> QuotaRequest:
    request = _lock_pending(request)
    return _decide(request, status=QuotaRequestStatus.CANCELLED, actor=actor, reason="")


@nestable
@transaction.atomic(durable=True)
def pool_quota_auto_approve_set(*, pool: CapacityPool, max_tps: int, actor: Actor
                                ) -> PoolAdmission:
    """Requests raising a guarantee by at most `max_tps` (and fitting the pool) are approved
    without an operator; 0 turns auto-approval off."""
    if max_tps < 0:
        raise DomainError("The auto-approval headroom cannot be negative.",
                          code="invalid_input",
                          fields={"quota_auto_approve_max_tps": ["Must be 0 or more."]})
    row, _ = PoolAdmission.objects.select_for_update().get_or_create(pool=pool)
    before = row.quota_auto_approve_max_tps
    if before != max_tps:
        row.quota_auto_approve_max_tps = max_tps
        row.save(update_fields=["quota_auto_approve_max_tps", "updated_at"])
        audit_record(actor=actor, action="pool.quota_auto_approve_set", target=pool,
                     before={"quota_auto_approve_max_tps": before},
                     after={"quota_auto_approve_max_tps": max_tps})
    return row
