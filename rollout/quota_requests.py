"""Quota-increase requests: an org asks, an operator (or the pool's auto-approval rule) decides.

Approval is `allocation_change` / `allocation_grant`, so it takes the pool lock and the capacity
check like every other path that raises a guarantee: two approvals racing for the last free
tokens/s cannot both succeed.
"""

from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from orgs.models import Organization, OrgStatus
from orgs.services.audit import Actor, audit_record
from quotas.ledger import pool_standing_free
from quotas.models import Allocation, AllocationStatus, CapacityPool
from quotas.services import allocation_change, allocation_grant, pool_lock
from rollout.models import PoolAdmission, QuotaRequest, QuotaRequestStatus
from sluice.errors import Conflict, DomainError
from sluice.transactions import nestable

AUTO_APPROVER = "auto:quota_headroom"


# Each dimension a request carries, with the pool rule that bounds its auto-approved growth.
# Input tokens/s are not asked for: approval keeps the allocation's input limits.
AUTO_APPROVAL_RULES = (
    ("guaranteed_tps", "quota_auto_approve_max_tps"),
    ("burst_tps", "quota_auto_approve_max_burst_tps"),
    ("daily_tokens", "quota_auto_approve_max_daily_tokens"),
    ("max_concurrency", "quota_auto_approve_max_concurrency"),
)
LIMITS = tuple(dimension for dimension, _ in AUTO_APPROVAL_RULES)


def _snapshot(r: QuotaRequest) -> dict:
    return {"status": r.status, **{d: getattr(r, d) for d in LIMITS}}


def _current(org_id: int, pool_id: int) -> Allocation | None:
    return Allocation.objects.filter(org_id=org_id, pool_id=pool_id,
                                     status=AllocationStatus.ACTIVE).first()


def _growth(request: QuotaRequest, previous: dict) -> dict[str, int]:
    return {d: max(getattr(request, d) - previous[d], 0) for d in LIMITS}


def _auto_approved_growth(request: QuotaRequest, *, days: int) -> dict[str, int]:
    """What auto-approval already let this org's allocation in this pool grow by in the window:
    asking for a little many times adds up to the same as asking for it at once."""
    since = timezone.now() - timedelta(days=days)
    earlier = QuotaRequest.objects.filter(
        org_id=request.org_id, pool_id=request.pool_id, status=QuotaRequestStatus.APPROVED,
        decided_by=AUTO_APPROVER, decided_at__gte=since, previous_limits__isnull=False)
    total = dict.fromkeys(LIMITS, 0)
    for row in earlier:
        for dimension, grown in _growth(row, row.previous_limits).items():
            total[dimension] += grown
    return total


def _auto_approvable(request: QuotaRequest) -> bool:
    """Within every rule the pool sets, for an org that already holds an allocation there (a
    first allocation in a pool is the waitlist's business), and fitting the pool's free
    guaranteeable capacity. The caller holds the pool and org locks, so two requests of the
    org cannot both count the same room."""
    rules = PoolAdmission.objects.filter(pool_id=request.pool_id).first()
    current = _current(request.org_id, request.pool_id)
    if rules is None or current is None or not any(getattr(rules, r) for _, r in
                                                   AUTO_APPROVAL_RULES):
        return False
    asked = _growth(request, _allocation_limits(current))
    grown = _auto_approved_growth(request, days=rules.quota_auto_approve_window_days)
    if any(grown[d] + asked[d] > getattr(rules, rule) for d, rule in AUTO_APPROVAL_RULES):
        return False
    pool = request.pool
    # The ledger in time: the growth must fit at the busiest instant to come, bookings included.
    return (asked["guaranteed_tps"] <= pool_standing_free(pool=pool).output_tps
            and request.burst_tps <= pool.capacity_tps)


def _allocation_limits(allocation: Allocation) -> dict[str, int]:
    return {d: getattr(allocation, d) for d in LIMITS}


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
    # The house lock order (quotas/services.py): the pool, then the org. Held from here, so
    # auto-approval below sees every earlier request of this org in this pool decided.
    pool_lock(pool_id=pool.pk)
    Organization.objects.select_for_update().get(pk=org.pk)
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
                                            reason="within the pool's auto-approval rules")
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
    limits = {d: getattr(request, d) for d in LIMITS}
    current = _current(request.org_id, request.pool_id)
    why = f"quota request #{request.pk}"
    if current is None:
        allocation_grant.nested(org=request.org, pool=request.pool, actor=actor, reason=why,
                                **limits)
    else:
        request.previous_limits = _allocation_limits(current)
        request.save(update_fields=["previous_limits"])
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


AUTO_APPROVAL_FIELDS = (*(rule for _, rule in AUTO_APPROVAL_RULES),
                        "quota_auto_approve_window_days")


def _check_rules(rules: dict[str, int]) -> None:
    errors = {}
    for field in AUTO_APPROVAL_FIELDS:
        value = rules.get(field)
        if not isinstance(value, int) or isinstance(value, bool):
            errors[field] = ["Required, a whole number."]
        elif value < 0:
            errors[field] = ["Must be 0 or more."]
    days = rules.get("quota_auto_approve_window_days")
    if isinstance(days, int) and not 1 <= days <= 366:
        errors["quota_auto_approve_window_days"] = ["Must be between 1 and 366 days."]
    if errors or set(rules) - set(AUTO_APPROVAL_FIELDS):
        errors |= {f: ["Unknown rule."] for f in set(rules) - set(AUTO_APPROVAL_FIELDS)}
        raise DomainError("The auto-approval rules are invalid.", code="invalid_input",
                          fields=errors)


@nestable
@transaction.atomic(durable=True)
def pool_quota_auto_approval_set(*, pool: CapacityPool, rules: dict[str, int], actor: Actor
                                 ) -> PoolAdmission:
    """The pool's auto-approval rules, all together (`AUTO_APPROVAL_FIELDS`): how much each
    dimension of an allocation may grow without an operator within the window. All rules at 0
    turn auto-approval off."""
    _check_rules(rules)
    row, _ = PoolAdmission.objects.select_for_update().get_or_create(pool=pool)
    before = {f: getattr(row, f) for f in AUTO_APPROVAL_FIELDS}
    if before != rules:
        for field, value in rules.items():
            setattr(row, field, value)
        row.save(update_fields=[*AUTO_APPROVAL_FIELDS, "updated_at"])
        audit_record(actor=actor, action="pool.quota_auto_approve_set", target=pool,
                     before=before, after=dict(rules))
    return row
