from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from django.db.models import (
    Count,
    Max,
    Q,
    QuerySet,
    Sum,
)
from django.utils import timezone

from orgs.selectors import orgs_visible_to
from quotas.models import Allocation, AllocationStatus, CapacityPool
from sluice.errors import NotFound


def pool_get(*, pool_id: int) -> CapacityPool:
    """404 (NotFound, an Http404 too) for the REST API and the console alike."""
    pool = CapacityPool.objects.filter(pk=pool_id).first()
    if pool is None:
        raise NotFound("No such pool.")
    return pool


def pool_regions() -> list[str]:
    """The regions some pool serves: the only ones an application can be queued in."""
    return list(CapacityPool.objects.order_by("region").values_list("region", flat=True)
                .distinct())


def allocation_get_for_user(*, user, allocation_id: int) -> Allocation:
    """One query scoped to the orgs `user` may see: another org's allocation answers exactly
    like a missing one (same 404, same message)."""
    allocation = (Allocation.objects.filter(pk=allocation_id, org__in=orgs_visible_to(user=user))
                  .first())
    if allocation is None:
        raise NotFound("No such allocation.")
    return allocation


def _in_force(*, now: datetime, prefix: str = "") -> Q:
    """Allocations that count against their pool: active and not past their end. `prefix`
    reaches them through a relation (`allocations__` from a pool)."""
    return Q(**{f"{prefix}status": AllocationStatus.ACTIVE}) & (
        Q(**{f"{prefix}valid_until__isnull": True}) | Q(**{f"{prefix}valid_until__gt": now}))


def allocations_in_force(*, now=None) -> QuerySet[Allocation]:
    return Allocation.objects.filter(_in_force(now=now or timezone.now()))


def pool_guaranteed_tps(*, pool: CapacityPool) -> int:
    return (allocations_in_force().filter(pool=pool)
            .aggregate(total=Sum("guaranteed_tps"))["total"] or 0)


class AllocationMaxima(NamedTuple):
    """The largest of each limit among an org's allocations in force (None: none)."""
    burst_tps: int | None
    burst_input_tps: int | None
    daily_tokens: int | None
    max_concurrency: int | None


def org_allocation_maxima(*, org_id: int) -> AllocationMaxima:
    return AllocationMaxima(**allocations_in_force().filter(org_id=org_id).aggregate(
        burst_tps=Max("burst_tps"), burst_input_tps=Max("burst_input_tps"),
        daily_tokens=Max("daily_tokens"), max_concurrency=Max("max_concurrency")))


def pool_guaranteed_input_tps(*, pool: CapacityPool) -> int:
    return (allocations_in_force().filter(pool=pool)
            .aggregate(total=Sum("guaranteed_input_tps"))["total"] or 0)


@dataclass(frozen=True)
class PoolCapacitySummary:
    """Output (decode) tokens/s, and input (prefill) tokens/s when the pool declares them."""
    pool_id: int
    name: str
    capacity_tps: int
    guaranteeable_tps: int
    guaranteed_tps: int
    free_tps: int
    org_count: int
    prefill_capacity_tps: int | None = None
    guaranteeable_input_tps: int | None = None
    guaranteed_input_tps: int | None = None
    free_input_tps: int | None = None


def _summary(pool: CapacityPool, guaranteed: int, guaranteed_input: int,
             orgs: int) -> PoolCapacitySummary:
    guaranteeable_input = pool.guaranteeable_input_tps
    apart = guaranteeable_input is not None
    return PoolCapacitySummary(
        pool_id=pool.pk, name=str(pool), capacity_tps=pool.capacity_tps,
        guaranteeable_tps=pool.guaranteeable_tps, guaranteed_tps=guaranteed,
        free_tps=max(pool.guaranteeable_tps - guaranteed, 0), org_count=orgs,
        prefill_capacity_tps=pool.prefill_capacity_tps,
        guaranteeable_input_tps=guaranteeable_input,
        guaranteed_input_tps=guaranteed_input if apart else None,
        free_input_tps=max(guaranteeable_input - guaranteed_input, 0) if apart else None,
    )


def pool_capacity_summary(*, pool: CapacityPool) -> PoolCapacitySummary:
    agg = allocations_in_force().filter(pool=pool).aggregate(
        total=Sum("guaranteed_tps"), total_input=Sum("guaranteed_input_tps"),
        orgs=Count("org", distinct=True)
    )
    return _summary(pool, agg["total"] or 0, agg["total_input"] or 0, agg["orgs"])


def pool_capacity_summaries() -> list[PoolCapacitySummary]:
    """Every pool in one query."""
    in_force = _in_force(now=timezone.now(), prefix="allocations__")
    pools = CapacityPool.objects.annotate(
        guaranteed=Sum("allocations__guaranteed_tps", filter=in_force),
        guaranteed_input=Sum("allocations__guaranteed_input_tps", filter=in_force),
        orgs=Count("allocations__org", filter=in_force, distinct=True),
    )
    return [_summary(p, p.guaranteed or 0, p.guaranteed_input or 0, p.orgs) for p in pools]


def org_allocations(*, org) -> QuerySet[Allocation]:
    """The org's allocations in force, with their pools."""
    return allocations_in_force().filter(org=org).select_related("pool").order_by("pool__model")
