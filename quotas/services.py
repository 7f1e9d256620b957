"""Every state change of pools and allocations.

The capacity invariants — at every instant, the output guarantees in force (allocations and
bookings, quotas/ledger.py) never exceed the pool's guaranteeable decode capacity, and, in a
pool that declares a prefill capacity, the input guarantees never exceed its guaranteeable
prefill capacity — are kept by locking the pool row before reading the ledger. Every path that
raises a guarantee at some instant or lowers a capacity takes that lock, so concurrent grants,
bookings and capacity changes serialize on it and each sees the others' committed guarantees.

Input is metered apart exactly where the pool declares a prefill capacity: then every
allocation in force carries input TPS (given, or derived from its output TPS in the ratio of the
pool's prefill to decode capacity, also when an operator first declares the prefill capacity);
elsewhere input counts with output against the decode capacity (one fleet limit serves both).

The house lock order. Every transaction, in every app, takes its row locks in this order and
skips what it does not need:

    1. the rollout wave (its claim, a conditional UPDATE)
    2. the pool (`pool_lock`)
    3. organizations, several in primary-key order
    4. rows that belong to one organization: its application and checklist, quota requests,
       allocations, bookings and their charges, invoices, billing account, memberships;
       several of one table in primary-key order

Two transactions that take locks in one order cannot wait on each other in a circle, so none
deadlocks. A wave opening shows why the order is this one: it holds the pool while it ranks the
queue and the orgs while it admits them, then takes each admitted org's application and creates
its allocation. `select_for_update()` with `select_related()` locks the joined rows too, in an
order PostgreSQL chooses: always `of=("self",)`, and lock the org first where it is needed.
"""

from collections.abc import Sequence
from datetime import datetime, timedelta
from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from orgs.models import Organization, OrgStatus
from orgs.services.audit import Actor, audit_record
from quotas.bookings import bookings_break, bookings_break_named, bookings_named_check
from quotas.errors import CapacityBelowBookings, CapacityBelowGuarantees, CapacityExhausted
from quotas.events import capacity_freed
from quotas.ledger import FOREVER, bookings_relying_on, capacity_conflicts, window_free
from quotas.models import Allocation, AllocationStatus, CapacityPool
from quotas.publish import limits_publish_org_later, limits_publish_pool_later
from quotas.selectors import allocations_in_force, pool_guaranteed_input_tps, pool_guaranteed_tps
from sluice.errors import Conflict, DomainError
from sluice.transactions import nestable, nested_atomic

# An allocation can be prepared for an org about to be admitted, and kept while it is suspended.
ORG_STATES_HOLDING_ALLOCATIONS = frozenset({OrgStatus.APPROVED, OrgStatus.ACTIVE,
                                            OrgStatus.SUSPENDED})


def pool_lock(*, pool_id: int) -> CapacityPool:
    """The first lock of the house order (module docstring)."""
    return CapacityPool.objects.select_for_update().get(pk=pool_id)


def _capacity_freed(*, pool_id: int) -> None:
    """An allocation ended or shrank: rollout may admit the next queued orgs."""
    capacity_freed.emit(pool_id=pool_id)


def _allocation_snapshot(a: Allocation) -> dict:
    return {
        "guaranteed_tps": a.guaranteed_tps, "burst_tps": a.burst_tps,
        "guaranteed_input_tps": a.guaranteed_input_tps, "burst_input_tps": a.burst_input_tps,
        "daily_tokens": a.daily_tokens, "max_concurrency": a.max_concurrency,
        "status": a.status,
        "valid_until": a.valid_until.isoformat() if a.valid_until else None,
    }


def _check_limits(*, guaranteed_tps: int, burst_tps: int, daily_tokens: int,
                  max_concurrency: int, pool: CapacityPool,
                  guaranteed_input_tps: int | None = None,
                  burst_input_tps: int | None = None) -> None:
    errors = {}
    if guaranteed_tps < 1:
        errors["guaranteed_tps"] = ["Must be at least 1."]
    if burst_tps < guaranteed_tps:
        errors["burst_tps"] = ["Must be at least guaranteed_tps."]
    if burst_tps > pool.capacity_tps:
        errors["burst_tps"] = [f"Cannot exceed the pool's capacity ({pool.capacity_tps})."]
    if daily_tokens < 1:
        errors["daily_tokens"] = ["Must be at least 1."]
    if max_concurrency < 1:
        errors["max_concurrency"] = ["Must be at least 1."]
    if not pool.meters_input_apart:
        if guaranteed_input_tps is not None or burst_input_tps is not None:
            errors["guaranteed_input_tps"] = [
                "The pool declares no prefill capacity: input counts with output."]
    elif guaranteed_input_tps < 1:
        errors["guaranteed_input_tps"] = ["Must be at least 1."]
    elif burst_input_tps < guaranteed_input_tps:
        errors["burst_input_tps"] = ["Must be at least guaranteed_input_tps."]
    elif burst_input_tps > pool.prefill_capacity_tps:
        errors["burst_input_tps"] = [
            f"Cannot exceed the pool's prefill capacity ({pool.prefill_capacity_tps})."]
    if errors:
        raise DomainError("The allocation is invalid.", code="invalid_allocation", fields=errors)


def _input_derived(pool: CapacityPool, tps: int) -> int:
    """Input TPS in proportion to output TPS, in the ratio of the pool's prefill to decode
    capacity (rounded down, at least 1): what an allocation gets when none is given."""
    return max(1, tps * pool.prefill_capacity_tps // pool.capacity_tps)


def _input_limits(pool: CapacityPool, *, guaranteed_tps: int, burst_tps: int,
                  guaranteed_input_tps: int | None, burst_input_tps: int | None
                  ) -> tuple[int | None, int | None]:
    """The input TPS an allocation gets: None where the pool meters input with output (any
    given are left for _check_limits to refuse); given, or derived from the output TPS."""
    if not pool.meters_input_apart:
        return guaranteed_input_tps, burst_input_tps
    if guaranteed_input_tps is None:
        guaranteed_input_tps = _input_derived(pool, guaranteed_tps)
    if burst_input_tps is None:
        burst_input_tps = max(guaranteed_input_tps, _input_derived(pool, burst_tps))
    return guaranteed_input_tps, burst_input_tps


def _check_room(*, pool: CapacityPool, tps: int, input_tps: int | None,
                until: datetime | None, allocation: Allocation | None = None) -> None:
    """Refuse a standing guarantee of `tps` (and `input_tps`) from now until `until` (None:
    without end) that the ledger cannot hold at some instant, bookings included; `allocation`
    is the one it replaces. Only a guarantee that grows, or lasts longer, is checked. The
    caller holds the pool lock."""
    old_tps = allocation.guaranteed_tps if allocation else 0
    old_input = (allocation.guaranteed_input_tps or 0) if allocation else 0
    old_until = allocation.valid_until if allocation else None
    longer = allocation is not None and old_until is not None and (
        until is None or until > old_until)
    if tps <= old_tps and (input_tps or 0) <= old_input and not longer:
        return
    now = timezone.now()
    free = window_free(pool=pool, start=now, end=until or now + FOREVER,
                       exclude_allocation_id=allocation.pk if allocation else None)
    if tps > free.output_tps:
        raise CapacityExhausted(pool=pool, asked_tps=tps - old_tps,
                                guaranteeable_tps=pool.guaranteeable_tps,
                                guaranteed_tps=pool.guaranteeable_tps - free.output_tps + old_tps)
    if free.input_tps is not None and (input_tps or 0) > free.input_tps:
        raise CapacityExhausted(pool=pool, asked_tps=(input_tps or 0) - old_input,
                                guaranteeable_tps=pool.guaranteeable_input_tps,
                                guaranteed_tps=pool.guaranteeable_input_tps - free.input_tps
                                + old_input, limit="input")


@nestable
@transaction.atomic(durable=True)
def pool_create(*, model: str, region: str, tier: str, capacity_tps: int,
                guaranteeable_ratio: Decimal, actor: Actor,
                limiter_failure_policy: str | None = None,
                prefill_capacity_tps: int | None = None,
                output_estimate_default: int | None = None,
                output_estimate_floor: int | None = None,
                lease_ttl_seconds: int | None = None,
                queue_max_wait_ms: int | None = None) -> CapacityPool:
    if CapacityPool.objects.filter(model=model, region=region, tier=tier).exists():
        raise Conflict(f"A pool for {model} in {region} ({tier}) exists already.",
                       code="pool_exists")
    pool = CapacityPool(model=model, region=region, tier=tier, capacity_tps=capacity_tps,
                        guaranteeable_ratio=guaranteeable_ratio,
                        prefill_capacity_tps=prefill_capacity_tps)
    if limiter_failure_policy:
        pool.limiter_failure_policy = limiter_failure_policy
    if output_estimate_default is not None:
        pool.output_estimate_default = output_estimate_default
    if output_estimate_floor is not None:
        pool.output_estimate_floor = output_estimate_floor
    if lease_ttl_seconds is not None:
        pool.lease_ttl_seconds = lease_ttl_seconds
    if queue_max_wait_ms is not None:
        pool.queue_max_wait_ms = queue_max_wait_ms
    pool.save()
    audit_record(actor=actor, action="pool.create", target=pool,
                 after={"capacity_tps": capacity_tps, "ratio": str(guaranteeable_ratio),
                        "prefill_capacity_tps": prefill_capacity_tps})
    return pool


_UNCHANGED = object()


def _allocations_input_set(*, pool: CapacityPool, actor: Actor) -> None:
    """The pool started or stopped metering input apart: give its allocations in force input
    TPS derived from their output TPS (or take them away), and check the input invariant."""
    for allocation in (allocations_in_force().filter(pool=pool).select_related("org")
                       .select_for_update(of=("self",)).order_by("pk")):
        before = _allocation_snapshot(allocation)
        allocation.guaranteed_input_tps, allocation.burst_input_tps = _input_limits(
            pool, guaranteed_tps=allocation.guaranteed_tps, burst_tps=allocation.burst_tps,
            guaranteed_input_tps=None, burst_input_tps=None)
        allocation.save(update_fields=["guaranteed_input_tps", "burst_input_tps", "updated_at"])
        audit_record(actor=actor, action="allocation.change", target=allocation,
                     org=allocation.org, before=before,
                     after=_allocation_snapshot(allocation),
                     reason="the pool's prefill capacity changed")
        limits_publish_org_later(org_id=allocation.org_id)
    if pool.meters_input_apart:
        guaranteed = pool_guaranteed_input_tps(pool=pool)
        if guaranteed > pool.guaranteeable_input_tps:
            raise CapacityBelowGuarantees(pool=pool, limit="input",
                                          new_guaranteeable_tps=pool.guaranteeable_input_tps,
                                          guaranteed_tps=guaranteed)


def _bookings_break(*, pool: CapacityPool, guaranteeable_tps: int,
                    guaranteeable_input_tps: int | None, named: Sequence[int], actor: Actor,
                    reason: str) -> None:
    """A capacity lower than confirmed bookings need is refused (422
    `capacity_below_bookings`, the conflicting bookings in `details`) unless the operator names
    bookings to break that leave the others room: those are cancelled, refunded in full, and
    their orgs told. Naming a booking the change does not break is a mistake (400)."""
    conflicts = capacity_conflicts(pool=pool, guaranteeable_tps=guaranteeable_tps,
                                   guaranteeable_input_tps=guaranteeable_input_tps)
    named = bookings_named_check(conflict_ids={b.pk for b in conflicts.bookings}, named=named)
    if not conflicts:
        return
    rest = capacity_conflicts(pool=pool, guaranteeable_tps=guaranteeable_tps,
                              guaranteeable_input_tps=guaranteeable_input_tps,
                              exclude_booking_ids=named) if named else conflicts
    if rest:
        raise CapacityBelowBookings(pool=pool, conflicts=rest.bookings,
                                    excess_tps=rest.excess_tps,
                                    excess_input_tps=rest.excess_input_tps)
    why = "The pool's capacity was lowered" + (f": {reason}" if reason else ".")
    bookings_break(bookings=[b for b in conflicts.bookings if b.pk in named], actor=actor,
                   reason=why)


@nestable
@transaction.atomic(durable=True)
def pool_capacity_set(*, pool: CapacityPool, capacity_tps: int, actor: Actor,
                      guaranteeable_ratio: Decimal | None = None,
                      prefill_capacity_tps: int | None | object = _UNCHANGED,
                      reason: str = "", break_bookings: Sequence[int] = ()) -> CapacityPool:
    """Set the decode capacity (output tokens/s), and the prefill capacity (input tokens/s;
    None: input counts with output) when given. Refused below what allocations guarantee, and
    below what bookings need unless `break_bookings` names the bookings to cancel (see
    `_bookings_break`)."""
    pool = pool_lock(pool_id=pool.pk)
    ratio = pool.guaranteeable_ratio if guaranteeable_ratio is None else guaranteeable_ratio
    prefill = (pool.prefill_capacity_tps if prefill_capacity_tps is _UNCHANGED
               else prefill_capacity_tps)
    new_guaranteeable = CapacityPool.guaranteeable_for(capacity_tps, ratio)
    guaranteed = pool_guaranteed_tps(pool=pool)
    if new_guaranteeable < guaranteed:
        raise CapacityBelowGuarantees(pool=pool, new_guaranteeable_tps=new_guaranteeable,
                                      guaranteed_tps=guaranteed)
    if prefill is not None and pool.prefill_capacity_tps is not None:
        new_guaranteeable_input = CapacityPool.guaranteeable_for(prefill, ratio)
        guaranteed_input = pool_guaranteed_input_tps(pool=pool)
        if new_guaranteeable_input < guaranteed_input:
            raise CapacityBelowGuarantees(pool=pool, limit="input",
                                          new_guaranteeable_tps=new_guaranteeable_input,
                                          guaranteed_tps=guaranteed_input)
    if (capacity_tps, ratio, prefill) == (pool.capacity_tps, pool.guaranteeable_ratio,
                                          pool.prefill_capacity_tps) and not break_bookings:
        return pool
    _bookings_break(pool=pool, guaranteeable_tps=new_guaranteeable,
                    guaranteeable_input_tps=None if prefill is None
                    else CapacityPool.guaranteeable_for(prefill, ratio),
                    named=break_bookings, actor=actor, reason=reason)
    before = {"capacity_tps": pool.capacity_tps, "ratio": str(pool.guaranteeable_ratio),
              "prefill_capacity_tps": pool.prefill_capacity_tps}
    apart_before = pool.meters_input_apart
    pool.capacity_tps, pool.guaranteeable_ratio = capacity_tps, ratio
    pool.prefill_capacity_tps = prefill
    pool.save(update_fields=["capacity_tps", "guaranteeable_ratio", "prefill_capacity_tps",
                             "updated_at"])
    audit_record(actor=actor, action="pool.capacity_set", target=pool, before=before,
                 after={"capacity_tps": capacity_tps, "ratio": str(ratio),
                        "prefill_capacity_tps": prefill}, reason=reason)
    if pool.meters_input_apart != apart_before:
        _allocations_input_set(pool=pool, actor=actor)
    # Capacity moves the pool's headroom only (its orgs' limits stay): one write for the pool.
    limits_publish_pool_later(pool_id=pool.pk)
    return pool


@nestable
@transaction.atomic(durable=True)
def pool_settings_set(*, pool: CapacityPool, actor: Actor, capacity_tps: int,
                      guaranteeable_ratio: Decimal, limiter_failure_policy: str,
                      speed_floor_output_tps: int, ttft_ceiling_ms: int,
                      prefill_capacity_tps: int | None | object = _UNCHANGED,
                      output_estimate_default: int | None = None,
                      output_estimate_floor: int | None = None,
                      lease_ttl_seconds: int | None = None,
                      queue_max_wait_ms: int | None = None) -> CapacityPool:
    """Everything an operator edits on a pool; capacity goes through `pool_capacity_set`. The
    output estimate default and floor, and the lease TTL, stay as they are when not given."""
    pool = pool_capacity_set.nested(pool=pool, capacity_tps=capacity_tps, actor=actor,
                                    guaranteeable_ratio=guaranteeable_ratio,
                                    prefill_capacity_tps=prefill_capacity_tps)
    before = {"limiter_failure_policy": pool.limiter_failure_policy,
              "speed_floor_output_tps": pool.speed_floor_output_tps,
              "ttft_ceiling_ms": pool.ttft_ceiling_ms,
              "output_estimate_default": pool.output_estimate_default,
              "output_estimate_floor": pool.output_estimate_floor,
              "lease_ttl_seconds": pool.lease_ttl_seconds,
              "queue_max_wait_ms": pool.queue_max_wait_ms}
    after = {"limiter_failure_policy": limiter_failure_policy,
             "speed_floor_output_tps": speed_floor_output_tps,
             "ttft_ceiling_ms": ttft_ceiling_ms,
             "output_estimate_default": output_estimate_default or pool.output_estimate_default,
             "output_estimate_floor": (pool.output_estimate_floor if output_estimate_floor is None
                                       else output_estimate_floor),
             "lease_ttl_seconds": lease_ttl_seconds or pool.lease_ttl_seconds,
             "queue_max_wait_ms": (pool.queue_max_wait_ms if queue_max_wait_ms is None
                                   else queue_max_wait_ms)}
    if before != after:
        for field, value in after.items():
            setattr(pool, field, value)
        pool.save(update_fields=[*after, "updated_at"])
        audit_record(actor=actor, action="pool.settings_set", target=pool, before=before,
                     after=after)
        limits_publish_pool_later(pool_id=pool.pk)  # the estimates and the lease TTL
    return pool


@nestable
@transaction.atomic(durable=True)
def allocation_grant(*, org: Organization, pool: CapacityPool, guaranteed_tps: int,
                     burst_tps: int, daily_tokens: int, max_concurrency: int, actor: Actor,
                     valid_until: datetime | None = None, reason: str = "",
                     guaranteed_input_tps: int | None = None,
                     burst_input_tps: int | None = None) -> Allocation:
    """Input TPS only where the pool declares a prefill capacity (derived from the output TPS
    when not given)."""
    # Lock the pool row: concurrent grants must see each other's guarantees. Then the org: an
    # offboarding that commits meanwhile is seen, not granted around.
    pool = pool_lock(pool_id=pool.pk)
    org = Organization.objects.select_for_update().get(pk=org.pk)
    if org.status not in ORG_STATES_HOLDING_ALLOCATIONS:
        raise Conflict(f"{org.name} is {org.status} and cannot hold an allocation.",
                       code="org_not_eligible")
    g_in, b_in = _input_limits(pool, guaranteed_tps=guaranteed_tps, burst_tps=burst_tps,
                               guaranteed_input_tps=guaranteed_input_tps,
                               burst_input_tps=burst_input_tps)
    _check_limits(guaranteed_tps=guaranteed_tps, burst_tps=burst_tps,
                  daily_tokens=daily_tokens, max_concurrency=max_concurrency, pool=pool,
                  guaranteed_input_tps=g_in, burst_input_tps=b_in)
    if Allocation.objects.filter(org=org, pool=pool, status=AllocationStatus.ACTIVE).exists():
        raise Conflict(f"{org.name} already has an allocation in {pool}; change it instead.",
                       code="allocation_exists")
    _check_room(pool=pool, tps=guaranteed_tps, input_tps=g_in, until=valid_until)
    allocation = Allocation.objects.create(
        org=org, pool=pool, guaranteed_tps=guaranteed_tps, burst_tps=burst_tps,
        guaranteed_input_tps=g_in, burst_input_tps=b_in,
        daily_tokens=daily_tokens, max_concurrency=max_concurrency, valid_until=valid_until,
    )
    audit_record(actor=actor, action="allocation.grant", target=allocation, org=org,
                 after=_allocation_snapshot(allocation), reason=reason)
    limits_publish_org_later(org_id=org.pk)
    return allocation


@nestable
@transaction.atomic(durable=True)
def allocation_change(*, allocation: Allocation, actor: Actor, guaranteed_tps: int | None = None,
                      burst_tps: int | None = None, daily_tokens: int | None = None,
                      max_concurrency: int | None = None, valid_until: datetime | None = None,
                      reason: str = "", guaranteed_input_tps: int | None = None,
                      burst_input_tps: int | None = None,
                      break_bookings: Sequence[int] = ()) -> Allocation:
    """A `valid_until` sooner than a confirmed booking of the org in the pool ends is refused
    (422 `allocation_ends_before_bookings`) unless `break_bookings` names every such booking
    (`quotas.bookings.bookings_break_named`)."""
    pool = pool_lock(pool_id=allocation.pool_id)
    allocation = Allocation.objects.select_for_update().get(pk=allocation.pk)
    if allocation.status != AllocationStatus.ACTIVE:
        raise Conflict("Only active allocations can be changed.", code="allocation_ended")
    before = _allocation_snapshot(allocation)
    g = allocation.guaranteed_tps if guaranteed_tps is None else guaranteed_tps
    b = allocation.burst_tps if burst_tps is None else burst_tps
    d = allocation.daily_tokens if daily_tokens is None else daily_tokens
    c = allocation.max_concurrency if max_concurrency is None else max_concurrency
    g_in = allocation.guaranteed_input_tps if guaranteed_input_tps is None \
        else guaranteed_input_tps
    b_in = allocation.burst_input_tps if burst_input_tps is None else burst_input_tps
    g_in, b_in = _input_limits(pool, guaranteed_tps=g, burst_tps=b, guaranteed_input_tps=g_in,
                               burst_input_tps=b_in)
    _check_limits(guaranteed_tps=g, burst_tps=b, daily_tokens=d, max_concurrency=c, pool=pool,
                  guaranteed_input_tps=g_in, burst_input_tps=b_in)
    _check_room(pool=pool, tps=g, input_tps=g_in,
                until=allocation.valid_until if valid_until is None else valid_until,
                allocation=allocation)
    sooner = valid_until is not None and (allocation.valid_until is None
                                          or valid_until < allocation.valid_until)
    if sooner or break_bookings:
        bookings_break_named(
            conflicts=bookings_relying_on(org_id=allocation.org_id, pool_id=pool.pk,
                                          ending_after=max(valid_until, timezone.now()))
            if sooner else [],
            named=break_bookings, actor=actor, code="allocation_ends_before_bookings",
            message=f"The allocation would end before bookings of {allocation.org.name} in "
                    f"{pool} do.",
            reason="The allocation this booking added to now ends before it"
                   + (f": {reason}" if reason else "."))
    if g < allocation.guaranteed_tps or (g_in or 0) < (allocation.guaranteed_input_tps or 0):
        _capacity_freed(pool_id=pool.pk)
    allocation.guaranteed_tps, allocation.burst_tps = g, b
    allocation.guaranteed_input_tps, allocation.burst_input_tps = g_in, b_in
    allocation.daily_tokens, allocation.max_concurrency = d, c
    if valid_until is not None:
        allocation.valid_until = valid_until
    allocation.save()
    audit_record(actor=actor, action="allocation.change", target=allocation,
                 org=allocation.org, before=before, after=_allocation_snapshot(allocation),
                 reason=reason)
    limits_publish_org_later(org_id=allocation.org_id)
    return allocation


@nestable
@transaction.atomic(durable=True)
def allocation_end(*, allocation: Allocation, actor: Actor, reason: str = "",
                   break_bookings: Sequence[int] = ()) -> Allocation:
    """Refused while bookings of the org in the pool rely on the allocation (422
    `allocation_has_bookings`) unless `break_bookings` names every one of them
    (`quotas.bookings.bookings_break_named`)."""
    # The house order: the org, then the allocation. A booking being confirmed holds the org
    # and waits for the allocation; this end then reads the booking once it is committed.
    Organization.objects.select_for_update().get(pk=allocation.org_id)
    allocation = Allocation.objects.select_for_update().get(pk=allocation.pk)
    if allocation.status != AllocationStatus.ACTIVE:
        raise Conflict("This allocation has already ended.", code="allocation_ended")
    before = _allocation_snapshot(allocation)
    allocation.status = AllocationStatus.ENDED
    now = timezone.now()
    if allocation.valid_until is None or allocation.valid_until > now:
        allocation.valid_until = max(now, allocation.valid_from + timedelta(seconds=1))
    allocation.save(update_fields=["status", "valid_until", "updated_at"])
    bookings_break_named(
        conflicts=bookings_relying_on(org_id=allocation.org_id, pool_id=allocation.pool_id,
                                      ending_after=now),
        named=break_bookings, actor=actor, now=now, code="allocation_has_bookings",
        message=f"Bookings of {allocation.org.name} in {allocation.pool} rely on this "
                "allocation.",
        reason="The allocation this booking added to ended" + (f": {reason}" if reason else "."))
    audit_record(actor=actor, action="allocation.end", target=allocation, org=allocation.org,
                 before=before, after=_allocation_snapshot(allocation), reason=reason)
    limits_publish_org_later(org_id=allocation.org_id)
    _capacity_freed(pool_id=allocation.pool_id)
    return allocation


@nested_atomic
def allocations_end_for_org(*, org: Organization, actor: Actor, reason: str) -> int:
    ended = 0
    for allocation in Allocation.objects.filter(org=org, status=AllocationStatus.ACTIVE
                                                ).order_by("pk"):
        allocation_end.nested(allocation=allocation, actor=actor, reason=reason)
        ended += 1
    return ended


def allocations_expire(*, now: datetime | None = None) -> int:
    """End allocations past valid_until (beat task). Each in its own transaction."""
    now = now or timezone.now()
    expired = Allocation.objects.filter(status=AllocationStatus.ACTIVE, valid_until__lte=now)
    count = 0
    for allocation in expired:
        try:
            # Its end was agreed: a booking is confirmed only within it, and shortening it
            # names what it breaks. Any booking still relying on it is the system's to break.
            allocation_end(allocation=allocation, actor="celery:allocations_expire",
                           reason="valid_until reached",
                           break_bookings=list(bookings_relying_on(
                               org_id=allocation.org_id, pool_id=allocation.pool_id,
                               ending_after=now).values_list("pk", flat=True)))
        except Conflict:
            continue  # ended meanwhile (by an operator, or by a concurrent run of this task)
        count += 1
    return count
