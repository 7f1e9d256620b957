"""The capacity ledger in time: reads. What is guaranteed in a pool at every instant of a
window, standing allocations and bookings together, and what is left free.

The invariant the services keep (quotas/services.py, quotas/bookings.py): at every instant,
the guarantees of the allocations in force plus the bookings whose window holds that instant
never exceed the pool's guaranteeable capacity (output, and input where the pool declares a
prefill capacity). The capacity counted is the pool's as it is now, for every instant to come:
capacity a scheduled rollout wave will add counts once the wave has opened and put it in the
pool, so a late or cancelled wave never breaks a sold booking.

A window's guarantees change only where an allocation ends (`valid_until`) or a booking starts
or ends, so they are a step function: `ledger_steps` reads the rows that overlap the window (an
index on the live bookings' pool and end) and sweeps their edges in order.
"""

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Max, Q, QuerySet, Sum
from django.utils import timezone

from quotas.models import BOOKING_LIVE_STATES, Booking, CapacityPool
from quotas.selectors import allocations_in_force
from sluice.errors import NotFound

# "For as long as there are bookings": past the furthest a booking can end.
FOREVER = timedelta(days=3650)


@dataclass(frozen=True)
class LedgerStep:
    """Guaranteed tokens/s from `at` until the next step (the last: until the window's end),
    allocations and bookings together; `booked_tps`: the bookings' part of `output_tps`."""
    at: datetime
    output_tps: int
    input_tps: int
    booked_tps: int = 0


def bookings_live(*, pool_id: int, start: datetime, end: datetime) -> QuerySet[Booking]:
    """The pool's bookings that hold capacity at some instant of [start, end)."""
    return Booking.objects.filter(pool_id=pool_id, state__in=BOOKING_LIVE_STATES,
                                  starts_at__lt=end, ends_at__gt=start)


def ledger_steps(*, pool: CapacityPool, start: datetime, end: datetime,
                 exclude_allocation_id: int | None = None,
                 exclude_booking_ids=()) -> list[LedgerStep]:
    """What the pool guarantees over [start, end), as steps."""
    base = [0, 0, 0]
    edges: dict[datetime, list[int]] = defaultdict(lambda: [0, 0, 0])

    def add(first: datetime, last: datetime, output: int, input_: int, booked: int = 0) -> None:
        at = edges[first] if first > start else base
        for i, value in enumerate((output, input_, booked)):
            at[i] += value
            if last < end:
                edges[last][i] -= value

    allocations = allocations_in_force(now=start).filter(pool_id=pool.pk)
    if exclude_allocation_id is not None:
        allocations = allocations.exclude(pk=exclude_allocation_id)
    # Those in force over the whole window are one sum (a pool holds hundreds); only those
    # ending inside it are steps.
    whole = allocations.filter(Q(valid_until__isnull=True) | Q(valid_until__gte=end)).aggregate(
        g=Sum("guaranteed_tps"), g_in=Sum("guaranteed_input_tps"))
    add(start, end, whole["g"] or 0, whole["g_in"] or 0)
    for g, g_in, until in allocations.filter(valid_until__lt=end).values_list(
            "guaranteed_tps", "guaranteed_input_tps", "valid_until"):
        add(start, until, g, g_in or 0)
    bookings = bookings_live(pool_id=pool.pk, start=start, end=end)
    if exclude_booking_ids:
        bookings = bookings.exclude(pk__in=list(exclude_booking_ids))
    for first, last, output, input_ in bookings.values_list("starts_at", "ends_at",
                                                            "output_tps", "input_tps"):
        add(max(first, start), last, output, input_, output)
    steps = [LedgerStep(start, *base)]
    levels = base
    for at in sorted(edges):
        levels = [level + change for level, change in zip(levels, edges[at], strict=True)]
        if at < end:
            steps.append(LedgerStep(at, *levels))
    return steps


@dataclass(frozen=True)
class WindowFree:
    """The least free over a window: what can still be guaranteed at every instant of it.
    Negative only if the ledger was broken from outside the services."""
    output_tps: int
    input_tps: int | None  # None: the pool meters input with output

    def fits(self, *, output_tps: int, input_tps: int = 0) -> bool:
        return output_tps <= self.output_tps and (
            self.input_tps is None or input_tps <= self.input_tps)


def window_free(*, pool: CapacityPool, start: datetime, end: datetime,
                guaranteeable_tps: int | None = None,
                guaranteeable_input_tps: int | None = None, **exclude) -> WindowFree:
    """Free over [start, end), against the pool's guaranteeable capacity (or the one given: a
    capacity about to be set)."""
    steps = ledger_steps(pool=pool, start=start, end=end, **exclude)
    g = pool.guaranteeable_tps if guaranteeable_tps is None else guaranteeable_tps
    g_in = pool.guaranteeable_input_tps if guaranteeable_input_tps is None \
        else guaranteeable_input_tps
    return WindowFree(output_tps=g - max(s.output_tps for s in steps),
                      input_tps=None if g_in is None else g_in - max(s.input_tps for s in steps))


def pool_standing_free(*, pool: CapacityPool, guaranteeable_tps: int | None = None,
                       now: datetime | None = None) -> WindowFree:
    """What a new standing allocation (from now, without end) could still be guaranteed: the
    free capacity at the busiest instant to come, bookings included. What the waves planner
    and admission fill."""
    now = now or timezone.now()
    return window_free(pool=pool, start=now, end=now + FOREVER,
                       guaranteeable_tps=guaranteeable_tps)


@dataclass(frozen=True)
class FreePoint:
    """One bucket: free at its busiest instant, and what allocations and bookings guarantee
    then."""
    at: datetime
    output_tps: int
    input_tps: int | None
    standing_tps: int = 0
    booked_tps: int = 0


def pool_free_series(*, pool: CapacityPool, start: datetime, end: datetime,
                     step: timedelta) -> list[FreePoint]:
    """Per bucket of `step` from `start`, the least free within it: what a booking covering the
    bucket could still get. One read of the ledger for the whole range."""
    steps = ledger_steps(pool=pool, start=start, end=end)
    g, g_in = pool.guaranteeable_tps, pool.guaranteeable_input_tps
    points, i = [], 0
    at = start
    while at < end:
        bucket_end = min(at + step, end)
        while i + 1 < len(steps) and steps[i + 1].at <= at:
            i += 1
        j, busiest, peak_in = i, steps[i], 0
        while j < len(steps) and steps[j].at < bucket_end:
            if steps[j].output_tps > busiest.output_tps:
                busiest = steps[j]
            peak_in = max(peak_in, steps[j].input_tps)
            j += 1
        points.append(FreePoint(at, max(g - busiest.output_tps, 0),
                                None if g_in is None else max(g_in - peak_in, 0),
                                standing_tps=busiest.output_tps - busiest.booked_tps,
                                booked_tps=busiest.booked_tps))
        at = bucket_end
    return points


@dataclass(frozen=True)
class CapacityConflicts:
    """What a lower guaranteeable capacity would break: the live bookings overlapping an
    instant where the guarantees would exceed it, and the excess at the worst instant."""
    bookings: list[Booking]
    excess_tps: int
    excess_input_tps: int

    def __bool__(self) -> bool:
        return bool(self.bookings)


def capacity_conflicts(*, pool: CapacityPool, guaranteeable_tps: int,
                       guaranteeable_input_tps: int | None, now: datetime | None = None,
                       exclude_booking_ids=()) -> CapacityConflicts:
    now = now or timezone.now()
    end = now + FOREVER
    steps = ledger_steps(pool=pool, start=now, end=end, exclude_booking_ids=exclude_booking_ids)
    over, excess, excess_in = [], 0, 0
    for step, following in zip(steps, [*steps[1:], None], strict=True):
        out = step.output_tps - guaranteeable_tps
        in_ = step.input_tps - guaranteeable_input_tps if guaranteeable_input_tps is not None \
            else 0
        if out > 0 or in_ > 0:
            over.append((step.at, following.at if following else end))
            excess, excess_in = max(excess, out), max(excess_in, in_)
    if not over:
        return CapacityConflicts([], 0, 0)
    live = (bookings_live(pool_id=pool.pk, start=over[0][0], end=over[-1][1])
            .exclude(pk__in=list(exclude_booking_ids)).select_related("org")
            .order_by("starts_at", "id"))
    conflicting = [b for b in live
                   if any(b.starts_at < last and b.ends_at > first for first, last in over)]
    return CapacityConflicts(conflicting, excess, excess_in)


def org_guarantee_at(*, org_id: int, pool_id: int, at: datetime) -> tuple[int, int]:
    """The org's guaranteed (output, input) tokens/s in the pool at `at`: its allocation in
    force then plus its bookings holding that instant. The weight the admission queue gives
    the org (the limiter holds the same figure in Redis for the instant it runs at)."""
    g = allocations_in_force(now=at).filter(org_id=org_id, pool_id=pool_id).values_list(
        "guaranteed_tps", "guaranteed_input_tps").first() or (0, 0)
    booked = [(o, i) for o, i in bookings_live(pool_id=pool_id, start=at,
                                               end=at + timedelta(microseconds=1))
              .filter(org_id=org_id).values_list("output_tps", "input_tps")]
    return g[0] + sum(o for o, _ in booked), (g[1] or 0) + sum(i for _, i in booked)


def bookings_relying_on(*, org_id: int, pool_id: int | None = None,
                        ending_after: datetime) -> QuerySet[Booking]:
    """The org's bookings (in one pool, or in all) still to be served after `ending_after`:
    what an allocation ending then, or the org's suspension or offboarding, would break."""
    bookings = Booking.objects.filter(org_id=org_id, state__in=BOOKING_LIVE_STATES,
                                      ends_at__gt=ending_after)
    if pool_id is not None:
        bookings = bookings.filter(pool_id=pool_id)
    return bookings.select_related("pool", "org").order_by("starts_at", "id")


@dataclass(frozen=True)
class BookedNow:
    """What an org's bookings in force add in one pool at an instant."""
    output_tps: int
    input_tps: int
    extra_daily_tokens: int
    until: datetime  # the last of their windows' ends


def org_booked_at(*, org_id: int, at: datetime) -> dict[int, BookedNow]:
    """Per pool, what the org's bookings holding `at` add to its allocation: what the limiter
    enforces on top of it then. One query."""
    rows = (Booking.objects.filter(org_id=org_id, state__in=BOOKING_LIVE_STATES,
                                   starts_at__lte=at, ends_at__gt=at)
            .values("pool_id").annotate(o=Sum("output_tps"), i=Sum("input_tps"),
                                        d=Sum("extra_daily_tokens"), until=Max("ends_at"))
            .order_by())
    return {r["pool_id"]: BookedNow(r["o"], r["i"], r["d"], r["until"]) for r in rows}


def org_bookings(*, org, pool: CapacityPool | None = None) -> QuerySet[Booking]:
    """The org's bookings, latest window first."""
    bookings = Booking.objects.filter(org=org).select_related("pool")
    if pool is not None:
        bookings = bookings.filter(pool=pool)
    return bookings.order_by("-starts_at", "-id")


def org_booking_get(*, org, booking_id: int) -> Booking:
    """Another org's booking answers exactly like a missing one."""
    booking = Booking.objects.select_related("pool").filter(org=org, pk=booking_id).first()
    if booking is None:
        raise NotFound("No such booking.")
    return booking


def booking_get(*, booking_id: int) -> Booking:
    booking = Booking.objects.select_related("pool", "org").filter(pk=booking_id).first()
    if booking is None:
        raise NotFound("No such booking.")
    return booking


def pool_bookings(*, pool: CapacityPool | None = None, state: str = "",
                  since: datetime | None = None) -> QuerySet[Booking]:
    """Bookings for operators: by pool, state, and windows ending after `since`."""
    bookings = Booking.objects.select_related("pool", "org")
    if pool is not None:
        bookings = bookings.filter(pool=pool)
    if state:
        bookings = bookings.filter(state=state)
    if since is not None:
        bookings = bookings.filter(ends_at__gt=since)
    return bookings.order_by("starts_at", "id")
