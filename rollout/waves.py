"""Rollout waves: create, plan, open, close; and per-pool auto-admission.

Opening a wave is one transaction: claim the wave (conditional UPDATE scheduled -> open), lock
the pool, add the wave's capacity, then admit the best-ranked queued orgs that fit, each with
`org_admit` + `allocation_grant` (the capacity ledger re-checks every guarantee under the same
pool lock). Either all of that commits or none of it does.
"""

from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from orgs.models import Organization, OrgStatus
from orgs.services.audit import Actor, audit_record
from orgs.services.lifecycle import org_admit
from quotas.models import CapacityPool
from quotas.selectors import pool_guaranteed_tps
from quotas.services import allocation_grant, pool_capacity_set, pool_lock
from rollout.events import wave_opened
from rollout.models import PoolAdmission, RolloutWave, WaveState
from rollout.waitlist import (
    QueueEntry,
    demand_model,
    pool_free_tps,
    waitlist_queue,
    waitlist_select,
)
from sluice.errors import Conflict, DomainError
from sluice.transactions import nestable, nested_atomic

WAVE_FIELDS = ("name", "opens_at", "closes_at", "capacity_tps", "max_orgs", "guaranteed_tps",
               "burst_tps", "daily_tokens", "max_concurrency")


def _wave_snapshot(wave: RolloutWave) -> dict:
    snap = {f: getattr(wave, f) for f in WAVE_FIELDS}
    snap["opens_at"] = wave.opens_at.isoformat()
    snap["closes_at"] = wave.closes_at.isoformat() if wave.closes_at else None
    return {**snap, "state": wave.state, "pool": wave.pool_id}


def _wave_validate(*, pool: CapacityPool, values: dict) -> None:
    """Raise one DomainError (400, invalid_wave) naming every bad field."""
    errors = {}
    if not str(values.get("name") or "").strip():
        errors["name"] = ["A wave needs a name."]
    for name in ("max_orgs", "guaranteed_tps", "daily_tokens", "max_concurrency"):
        if values[name] < 1:
            errors[name] = ["Must be at least 1."]
    if values["capacity_tps"] < 0:
        errors["capacity_tps"] = ["Cannot be negative."]
    if values["burst_tps"] < values["guaranteed_tps"]:
        errors["burst_tps"] = ["Must be at least guaranteed_tps."]
    elif values["burst_tps"] > pool.capacity_tps + values["capacity_tps"]:
        errors["burst_tps"] = ["Cannot exceed the pool's capacity after the wave."]
    if values["closes_at"] is not None and values["closes_at"] <= values["opens_at"]:
        errors["closes_at"] = ["Must be after opens_at."]
    if errors:
        raise DomainError("The wave is invalid.", code="invalid_wave", fields=errors)


@nestable
@transaction.atomic(durable=True)
def wave_create(*, pool: CapacityPool, name: str, opens_at: datetime, capacity_tps: int,
                max_orgs: int, guaranteed_tps: int, burst_tps: int, daily_tokens: int,
                max_concurrency: int, actor: Actor,
                closes_at: datetime | None = None) -> RolloutWave:
    values = dict(name=name, opens_at=opens_at, closes_at=closes_at, capacity_tps=capacity_tps,
                  max_orgs=max_orgs, guaranteed_tps=guaranteed_tps, burst_tps=burst_tps,
                  daily_tokens=daily_tokens, max_concurrency=max_concurrency)
    _wave_validate(pool=pool, values=values)
    values["name"] = name.strip()
    user = actor if getattr(actor, "is_authenticated", False) else None
    wave = RolloutWave.objects.create(pool=pool, created_by=user, **values)
    audit_record(actor=actor, action="wave.create", target=wave, after=_wave_snapshot(wave))
    return wave


@dataclass(frozen=True)
class WavePlan:
    """What opening the wave now would do. Guaranteed utilization is guarantees over the
    guaranteeable capacity; projected utilization is expected peak demand (corrected by the
    observed usage of admitted orgs with the same use case, when there is some) over capacity."""

    wave: RolloutWave
    admitted: list[QueueEntry]
    capacity_tps_before: int
    capacity_tps_after: int
    guaranteeable_tps_after: int
    guaranteed_tps_before: int
    guaranteed_tps_after: int
    # Confirmed bookings at their busiest instant to come, on top of the allocations: the wave
    # admits only into what they leave free.
    booked_peak_tps: int
    guaranteed_utilization: float
    projected_tps: float
    projected_utilization: float
    projection_uses_observed_usage: bool
    free_tps_after: int
    queued_after: int
    queued_after_expected_tps: int


def wave_plan(*, wave: RolloutWave) -> WavePlan:
    if wave.state != WaveState.SCHEDULED:
        raise Conflict(f"The wave is {wave.state}; only scheduled waves are planned.",
                       code="wave_not_scheduled")
    pool = wave.pool
    capacity_after = pool.capacity_tps + wave.capacity_tps
    guaranteeable_after = CapacityPool.guaranteeable_for(capacity_after, pool.guaranteeable_ratio)
    guaranteed = pool_guaranteed_tps(pool=pool)
    queue = waitlist_queue(pool=pool, wave=wave)
    free_before = pool_free_tps(pool=pool, guaranteeable_tps=guaranteeable_after)
    booked_peak = max(guaranteeable_after - free_before - guaranteed, 0)
    chosen, free_after = waitlist_select(queue=queue, free_tps=free_before,
                                         guaranteed_tps=wave.guaranteed_tps,
                                         max_orgs=wave.max_orgs)
    guaranteed_after = guaranteed + wave.guaranteed_tps * len(chosen)
    demand = demand_model(pool=pool)
    projected = demand.admitted_projected_tps + sum(
        demand.project(e.application, burst_tps=wave.burst_tps) for e in chosen)
    chosen_ids = {e.org_id for e in chosen}
    rest = [e for e in queue if e.org_id not in chosen_ids]
    return WavePlan(
        wave=wave, admitted=chosen, capacity_tps_before=pool.capacity_tps,
        capacity_tps_after=capacity_after, guaranteeable_tps_after=guaranteeable_after,
        guaranteed_tps_before=guaranteed, guaranteed_tps_after=guaranteed_after,
        booked_peak_tps=booked_peak,
        guaranteed_utilization=guaranteed_after / guaranteeable_after if guaranteeable_after
        else 0.0,
        projected_tps=projected,
        projected_utilization=projected / capacity_after if capacity_after else 0.0,
        projection_uses_observed_usage=demand.observed, free_tps_after=free_after,
        queued_after=len(rest),
        queued_after_expected_tps=sum(e.application.expected_peak_tps for e in rest),
    )


@nested_atomic
def _admit_queued(*, pool: CapacityPool, queue: list[QueueEntry], template: RolloutWave,
                  max_orgs: int | None, actor: Actor, reason: str) -> list[QueueEntry]:
    """Admit the best-ranked queued orgs that fit, with `template`'s default allocation.
    The caller holds the pool lock and ranked `queue` under it."""
    # Lock the candidates in primary-key order: a concurrent lifecycle change (an operator
    # rejecting or offboarding one of them) waits for us instead of slipping in between.
    locked = Organization.objects.select_for_update().filter(
        pk__in=[e.org_id for e in queue]).order_by("pk")
    still_approved = {o.pk for o in locked if o.status == OrgStatus.APPROVED}
    queue = [e for e in queue if e.org_id in still_approved]
    chosen, _ = waitlist_select(queue=queue, free_tps=pool_free_tps(pool=pool),
                                guaranteed_tps=template.guaranteed_tps, max_orgs=max_orgs)
    for entry in chosen:
        org = entry.application.org
        org_admit.nested(org=org, actor=actor, reason=reason)
        allocation_grant.nested(
            org=org, pool=pool, guaranteed_tps=template.guaranteed_tps,
            burst_tps=template.burst_tps, daily_tokens=template.daily_tokens,
            max_concurrency=template.max_concurrency, actor=actor, reason=reason)
    return chosen


@transaction.atomic(durable=True)
def wave_open(*, wave: RolloutWave, actor: Actor) -> RolloutWave:
    """Open a scheduled wave (beat when due, or an operator by hand, early if they like)."""
    # Claim with a conditional UPDATE: it takes the row lock, so a second worker waits here,
    # then re-reads the row under READ COMMITTED, finds it open and updates nothing.
    claimed = RolloutWave.objects.filter(pk=wave.pk, state=WaveState.SCHEDULED).update(
        state=WaveState.OPEN, opened_at=timezone.now())
    if not claimed:
        raise Conflict("This wave is not scheduled (already opened or closed).",
                       code="wave_not_scheduled")
    wave = RolloutWave.objects.select_related("pool").get(pk=wave.pk)
    pool = pool_lock(pool_id=wave.pool_id)
    # Rank before adding capacity, exactly as wave_plan did, so plan and opening agree.
    queue = waitlist_queue(pool=pool, wave=wave)
    if wave.capacity_tps:
        pool = pool_capacity_set.nested(
            pool=pool, capacity_tps=pool.capacity_tps + wave.capacity_tps, actor=actor,
            reason=f"rollout wave {wave.name}")
    chosen = _admit_queued(pool=pool, queue=queue, template=wave, max_orgs=wave.max_orgs,
                           actor=actor,
                           reason=f"admitted in rollout wave {wave.name}")
    wave.admitted_count = len(chosen)
    wave.save(update_fields=["admitted_count"])
    wave_opened.emit(wave=wave, org_ids=[e.org_id for e in chosen])
    audit_record(actor=actor, action="wave.open", target=wave,
                 after={**_wave_snapshot(wave), "admitted": [e.org_id for e in chosen]})
    return wave


@transaction.atomic(durable=True)
def wave_close(*, wave: RolloutWave, actor: Actor, reason: str = "") -> RolloutWave:
    """Close an open wave, or cancel a scheduled one (it then never adds capacity)."""
    before = wave.state
    closed = RolloutWave.objects.filter(
        pk=wave.pk, state__in=[WaveState.SCHEDULED, WaveState.OPEN],
    ).update(state=WaveState.CLOSED, closed_at=timezone.now())
    if not closed:
        raise Conflict("This wave is already closed.", code="wave_closed")
    wave.refresh_from_db()
    audit_record(actor=actor, action="wave.close", target=wave, before={"state": before},
                 after={"state": wave.state}, reason=reason)
    return wave


def waves_open_due(*, now: datetime | None = None, actor: Actor = "celery:wave_open") -> int:
    """Open every scheduled wave whose time has come, each in its own transaction. A wave
    another worker opened first is skipped."""
    now = now or timezone.now()
    opened = 0
    due = RolloutWave.objects.filter(state=WaveState.SCHEDULED, opens_at__lte=now)
    for wave in due.order_by("opens_at", "id"):
        try:
            wave_open(wave=wave, actor=actor)
        except Conflict:
            continue
        opened += 1
    return opened


def waves_close_due(*, now: datetime | None = None, actor: Actor = "celery:wave_close") -> int:
    """Close open waves past their `closes_at`."""
    now = now or timezone.now()
    closed = 0
    for wave in RolloutWave.objects.filter(state=WaveState.OPEN, closes_at__lte=now):
        try:
            wave_close(wave=wave, actor=actor, reason="closes_at reached")
        except Conflict:
            continue
        closed += 1
    return closed


@nestable
@transaction.atomic(durable=True)
def pool_auto_admit_set(*, pool: CapacityPool, enabled: bool, actor: Actor) -> PoolAdmission:
    settings_row, _ = PoolAdmission.objects.select_for_update().get_or_create(pool=pool)
    before = settings_row.auto_admit
    if before != enabled:  # an unchanged setting is not an event
        settings_row.auto_admit = enabled
        settings_row.save()
        audit_record(actor=actor, action="pool.auto_admit_set", target=pool,
                     before={"auto_admit": before}, after={"auto_admit": enabled})
    return settings_row


@transaction.atomic(durable=True)
def pool_admission_set(*, pool: CapacityPool, auto_admit: bool, auto_approval: dict[str, int],
                       actor: Actor) -> PoolAdmission:
    """The pool's admission settings together: all are saved or none."""
    from rollout.quota_requests import pool_quota_auto_approval_set

    pool_auto_admit_set.nested(pool=pool, enabled=auto_admit, actor=actor)
    return pool_quota_auto_approval_set.nested(pool=pool, rules=auto_approval, actor=actor)


@transaction.atomic(durable=True)
def pool_auto_admit(*, pool_id: int, actor: Actor = "celery:auto_admit") -> list[QueueEntry]:
    """Admit queued orgs into capacity that freed up, if the pool allows it, with the default
    allocation of the pool's latest opened wave (no wave yet: nothing to copy, no admission)."""
    if not PoolAdmission.objects.filter(pool_id=pool_id, auto_admit=True).exists():
        return []
    pool = pool_lock(pool_id=pool_id)
    template = (RolloutWave.objects.filter(pool=pool, opened_at__isnull=False)
                .order_by("-opened_at", "-id").first())
    if template is None:
        return []
    return _admit_queued(pool=pool, queue=waitlist_queue(pool=pool), template=template,
                         max_orgs=None, actor=actor, reason="auto-admitted: capacity freed up")
