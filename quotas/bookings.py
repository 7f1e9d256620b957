"""Bookings: extra guaranteed tokens/s an org reserves in a pool for a window. State changes.

The rules of a window (UTC):
- on a 15-minute grid (starts and ends at :00, :15, :30 or :45, seconds 0);
- at least 1 hour long, at most 7 days;
- starting at least a minute from now (the limiter learns of it before its first second) and
  at most 60 days ahead.

A booking adds to an allocation: the org needs one in force in the pool, active, until the
window ends. It is confirmed only if the ledger (quotas/ledger.py) has the room at every
instant of the window. The lock order is the house's (quotas/services.py): the pool, then the
org, then its allocation and booking rows; a booking, an allocation grant and a capacity change
of one pool therefore serialize on the pool row and each reads the ledger the others committed.

Money is billing's: billing's `booking_confirm` quotes, checks the spend cap and calls
`booking_create` inside its own transaction; a cancellation announces `booking_cancelled` and
billing refunds it.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from orgs.models import Organization, OrgStatus
from orgs.services.audit import Actor, audit_record
from quotas.errors import BookingNoRoom, ChangeBreaksBookings
from quotas.events import booking_cancelled, booking_ended, booking_started, capacity_freed
from quotas.ledger import window_free
from quotas.models import Allocation, AllocationStatus, Booking, BookingState, CapacityPool
from quotas.publish import limits_publish_org_later
from quotas.selectors import allocations_in_force
from sluice.errors import Conflict, DomainError, PermissionDenied, Unprocessable
from sluice.transactions import nestable

BOOKING_SLOT = timedelta(minutes=15)
BOOKING_MIN = timedelta(hours=1)
BOOKING_MAX = timedelta(days=7)
BOOKING_LEAD = timedelta(minutes=1)
BOOKING_HORIZON = timedelta(days=60)
# Schema maxima, as for quota requests: beyond them the input is malformed, not just too big.
BOOKING_TPS_MAX = 10_000_000
BOOKING_DAILY_TOKENS_MAX = 10**12


@dataclass(frozen=True)
class BookingAsk:
    """What an org asks for: validated by `booking_validate`."""
    starts_at: datetime
    ends_at: datetime
    output_tps: int
    input_tps: int = 0
    extra_daily_tokens: int = 0

    @property
    def hours(self) -> float:
        return (self.ends_at - self.starts_at).total_seconds() / 3600


def _on_grid(moment: datetime) -> bool:
    return (moment.second, moment.microsecond) == (0, 0) and moment.minute % 15 == 0


def _window_problems(ask: BookingAsk, now: datetime) -> tuple[dict, list[str]]:
    fields: dict[str, list[str]] = {}
    problems: list[str] = []

    def bad(field: str, problem: str, message: str) -> None:
        fields.setdefault(field, []).append(message)
        problems.append(problem)

    if ask.starts_at.tzinfo is None or ask.ends_at.tzinfo is None:
        bad("starts_at", "naive_time", "Give times in UTC (with Z or +00:00).")
        return fields, problems
    for name in ("starts_at", "ends_at"):
        if not _on_grid(getattr(ask, name)):
            bad(name, "misaligned", "Windows start and end on the quarter hour (:00, :15, :30, "
                                    ":45), seconds 0.")
    length = ask.ends_at - ask.starts_at
    if length < BOOKING_MIN:
        bad("ends_at", "too_short", "A window lasts at least 1 hour.")
    elif length > BOOKING_MAX:
        bad("ends_at", "too_long", "A window lasts at most 7 days.")
    if ask.starts_at < now + BOOKING_LEAD:
        bad("starts_at", "in_past", "A window starts at least a minute from now.")
    elif ask.starts_at > now + BOOKING_HORIZON:
        bad("starts_at", "too_far_ahead", "A window starts at most 60 days ahead.")
    return fields, problems


def _size_problems(ask: BookingAsk, pool: CapacityPool) -> tuple[dict, list[str]]:
    fields: dict[str, list[str]] = {}
    problems: list[str] = []
    if not 1 <= ask.output_tps <= BOOKING_TPS_MAX:
        fields["output_tps"] = [f"From 1 to {BOOKING_TPS_MAX:,}."]
        problems.append("output_tps")
    if not 0 <= ask.input_tps <= BOOKING_TPS_MAX:
        fields["input_tps"] = [f"From 0 to {BOOKING_TPS_MAX:,}."]
        problems.append("input_tps")
    elif ask.input_tps and not pool.meters_input_apart:
        fields["input_tps"] = ["This pool declares no prefill capacity: input counts with "
                               "output, book output tokens/s only."]
        problems.append("input_not_metered")
    if not 0 <= ask.extra_daily_tokens <= BOOKING_DAILY_TOKENS_MAX:
        fields["extra_daily_tokens"] = [f"From 0 to {BOOKING_DAILY_TOKENS_MAX:,}."]
        problems.append("extra_daily_tokens")
    return fields, problems


def booking_validate(*, org: Organization, pool: CapacityPool, ask: BookingAsk,
                     now: datetime | None = None) -> Allocation:
    """Refuse a booking that can never be: malformed (400 `invalid_booking`, every bad field
    named, `details.problems` machine-readable), larger than the pool could ever guarantee
    (422 `booking_exceeds_pool`), or in a pool where the org holds no allocation for the whole
    window (403 `no_allocation`, 422 `allocation_ends_before_window`). Returns the allocation
    the booking adds to. Reads only."""
    now = now or timezone.now()
    fields, problems = _window_problems(ask, now)
    more_fields, more = _size_problems(ask, pool)
    fields.update(more_fields)
    if fields:
        raise DomainError("The booking is invalid.", code="invalid_booking", fields=fields,
                          details={"problems": problems + more})
    if ask.output_tps > pool.guaranteeable_tps or (
            pool.meters_input_apart and ask.input_tps > pool.guaranteeable_input_tps):
        raise Unprocessable(
            f"Pool {pool} can guarantee at most {pool.guaranteeable_tps:,} tokens/s in all.",
            code="booking_exceeds_pool",
            details={"guaranteeable_tps": pool.guaranteeable_tps,
                     "guaranteeable_input_tps": pool.guaranteeable_input_tps})
    if org.status != OrgStatus.ACTIVE:
        raise Conflict(f"{org.name} is {org.status}: only active organizations book capacity.",
                       code="org_not_active")
    allocation = allocations_in_force(now=now).filter(org=org, pool=pool).first()
    if allocation is None:
        raise PermissionDenied("Your organization holds no allocation in this pool: a booking "
                               "adds to one.", code="no_allocation")
    if allocation.valid_until is not None and allocation.valid_until < ask.ends_at:
        raise Unprocessable("Your allocation in this pool ends before the window does.",
                            code="allocation_ends_before_window",
                            details={"valid_until": allocation.valid_until.isoformat()})
    return allocation


def booking_room_check(*, pool: CapacityPool, ask: BookingAsk) -> None:
    """409 `booking_no_room`, with the window's free headroom, unless the ledger holds the
    booking at every instant. The caller holds the pool lock."""
    free = window_free(pool=pool, start=ask.starts_at, end=ask.ends_at)
    if not free.fits(output_tps=ask.output_tps, input_tps=ask.input_tps):
        raise BookingNoRoom(pool=pool, starts_at=ask.starts_at, ends_at=ask.ends_at,
                            asked_tps=ask.output_tps, asked_input_tps=ask.input_tps,
                            free_tps=max(free.output_tps, 0),
                            free_input_tps=None if free.input_tps is None
                            else max(free.input_tps, 0))


def booking_snapshot(booking: Booking) -> dict:
    return {"pool": booking.pool_id, "starts_at": booking.starts_at.isoformat(),
            "ends_at": booking.ends_at.isoformat(), "output_tps": booking.output_tps,
            "input_tps": booking.input_tps, "extra_daily_tokens": booking.extra_daily_tokens,
            "state": booking.state}


@nestable
@transaction.atomic(durable=True)
def booking_create(*, org: Organization, pool: CapacityPool, ask: BookingAsk, actor: Actor,
                   now: datetime | None = None) -> Booking:
    """Confirm a booking if it fits (see the module docstring); billing's `booking_confirm` is
    the entry point that also prices it."""
    # The pool first: concurrent bookings, grants and capacity changes see each other.
    pool = CapacityPool.objects.select_for_update().get(pk=pool.pk)
    org = Organization.objects.select_for_update().get(pk=org.pk)
    # Then the allocation it adds to: an operator ending it meanwhile is seen (its end reads
    # the bookings after this commits), not ended under a booking it never saw.
    list(Allocation.objects.select_for_update().filter(org=org, pool=pool,
                                                      status=AllocationStatus.ACTIVE))
    booking_validate(org=org, pool=pool, ask=ask, now=now)
    booking_room_check(pool=pool, ask=ask)
    user = actor if getattr(actor, "is_authenticated", False) else None
    booking = Booking.objects.create(
        org=org, pool=pool, starts_at=ask.starts_at, ends_at=ask.ends_at,
        output_tps=ask.output_tps, input_tps=ask.input_tps,
        extra_daily_tokens=ask.extra_daily_tokens, created_by=user)
    audit_record(actor=actor, action="booking.create", target=booking, org=org,
                 after=booking_snapshot(booking))
    limits_publish_org_later(org_id=org.pk)
    return booking


@nestable
@transaction.atomic(durable=True)
def booking_cancel(*, booking: Booking, actor: Actor, reason: str = "",
                   by_operator: bool = False, now: datetime | None = None) -> Booking:
    """Cancel a booking whose window has not ended. Its org may cancel only before the window
    starts; an operator (or a change of the pool) also during it, with a full refund. Billing
    refunds it (`booking_cancelled`)."""
    booking = Booking.objects.select_for_update().select_related("pool", "org").get(
        pk=booking.pk)
    now = now or timezone.now()
    if not booking.is_live or booking.ends_at <= now:
        raise Conflict("Only a booking whose window has not ended can be cancelled.",
                       code="booking_not_cancellable",
                       details={"state": booking.phase_at(now)})
    if not by_operator and booking.starts_at <= now:
        raise Conflict("The window has started: only an operator can cancel it now.",
                       code="booking_started", details={"starts_at": booking.starts_at.isoformat()})
    before = booking_snapshot(booking)
    booking.state, booking.cancelled_at = BookingState.CANCELLED, now
    booking.cancel_reason, booking.cancelled_by_operator = reason[:500], by_operator
    booking.save(update_fields=["state", "cancelled_at", "cancel_reason",
                                "cancelled_by_operator"])
    audit_record(actor=actor, action="booking.cancel", target=booking, org=booking.org,
                 before=before, after=booking_snapshot(booking), reason=reason)
    limits_publish_org_later(org_id=booking.org_id)
    capacity_freed.emit(pool_id=booking.pool_id)
    booking_cancelled.emit(booking=booking)
    return booking


def bookings_named_check(*, conflict_ids, named) -> set[int]:
    """Naming a booking a change does not break is a mistake (400 `booking_not_in_conflict`):
    nothing is cancelled on a guess."""
    conflict_ids, named = set(conflict_ids), set(named)
    if named - conflict_ids:
        message = "Name only bookings the change breaks."
        raise DomainError(message, code="booking_not_in_conflict",
                          fields={"break_bookings": [message]},
                          details={"not_in_conflict": sorted(named - conflict_ids),
                                   "conflicts": sorted(conflict_ids)})
    return named


def bookings_break(*, bookings, actor: Actor, reason: str, now: datetime | None = None) -> int:
    """Cancel bookings a change of what they rely on breaks: refunded in full, their org told
    (billing's receiver of `booking_cancelled`). Inside the caller's transaction."""
    count = 0
    for booking in sorted(bookings, key=lambda b: b.pk):
        booking_cancel.nested(booking=booking, actor=actor, reason=reason, by_operator=True,
                              now=now)
        count += 1
    return count


def bookings_break_named(*, conflicts, named, actor: Actor, reason: str, code: str,
                         message: str, now: datetime | None = None) -> int:
    """The rule of every change that takes from a sold booking what it relies on (its
    allocation ends or ends sooner, its org is suspended or offboarded): refused (422 `code`,
    the bookings in `details.conflicts`) unless the operator names every booking it breaks;
    those are then cancelled, refunded in full, and their org told. A capacity change, which
    may break only some, is `quotas.services._bookings_break`."""
    conflicts = list(conflicts)
    ids = {b.pk for b in conflicts}
    extra = set(named) - ids
    # A booking whose window ended since it was named (a beat names them a moment before this
    # reads them) is no mistake: nothing is left of it to break.
    ended = set(Booking.objects.filter(pk__in=extra, ends_at__lte=now or timezone.now())
                .values_list("pk", flat=True)) if extra else set()
    named = bookings_named_check(conflict_ids=ids, named=set(named) - ended)
    if ids - named:
        raise ChangeBreaksBookings(code=code, message=message, conflicts=conflicts)
    return bookings_break(bookings=conflicts, actor=actor, reason=reason, now=now)


@transaction.atomic(durable=True)
def _booking_move(*, booking_id: int, to: str, event) -> bool:
    """Claim the change with a conditional UPDATE (a concurrent run finds it done), then
    announce it and republish the org: its limits' next scheduled change moves on."""
    states = {BookingState.ACTIVE: [BookingState.CONFIRMED],
              BookingState.ENDED: [BookingState.CONFIRMED, BookingState.ACTIVE]}[to]
    if not Booking.objects.filter(pk=booking_id, state__in=states).update(state=to):
        return False
    booking = Booking.objects.select_related("pool", "org").get(pk=booking_id)
    audit_record(actor="celery:bookings_advance", action=f"booking.{to}", target=booking,
                 org=booking.org, after={"state": to})
    event.emit(booking=booking)
    limits_publish_org_later(org_id=booking.org_id)
    return True


def bookings_advance(*, now: datetime | None = None) -> int:
    """Beat, every minute: record the windows that began or ended (webhooks, the portal's
    state). The limiter does not wait for this: it switches at the window's edges itself."""
    now = now or timezone.now()
    moved = 0
    for booking_id in (Booking.objects.filter(state=BookingState.CONFIRMED, starts_at__lte=now)
                       .order_by("starts_at", "pk").values_list("pk", flat=True)):
        moved += _booking_move(booking_id=booking_id, to=BookingState.ACTIVE,
                               event=booking_started)
    for booking_id in (Booking.objects.filter(state=BookingState.ACTIVE, ends_at__lte=now)
                       .order_by("ends_at", "pk").values_list("pk", flat=True)):
        moved += _booking_move(booking_id=booking_id, to=BookingState.ENDED,
                               event=booking_ended)
    return moved
