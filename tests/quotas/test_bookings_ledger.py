"""The capacity ledger in time (quotas/ledger.py, quotas/bookings.py): what a booking may be,
where it fits, and how allocations and capacity changes see bookings."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from orgs.models import OrgStatus
from quotas.bookings import BookingAsk, booking_cancel, booking_create, bookings_advance
from quotas.errors import BookingNoRoom, CapacityBelowBookings, CapacityExhausted
from quotas.events import booking_ended, booking_started
from quotas.ledger import capacity_conflicts, ledger_steps, org_guarantee_at, pool_free_series
from quotas.models import Booking, BookingState
from quotas.services import allocation_change, allocation_end, allocation_grant, pool_capacity_set
from sluice.errors import DomainError
from tests.factories import AllocationFactory, OrganizationFactory, PoolFactory

pytestmark = pytest.mark.django_db


def slot(hours: float = 24, *, minutes: int = 0) -> datetime:
    """A quarter hour `hours` from now (rounded down to the grid), UTC."""
    at = datetime.now(UTC) + timedelta(hours=hours, minutes=minutes)
    return at.replace(minute=at.minute - at.minute % 15, second=0, microsecond=0)


def ask(start: datetime, hours: float = 2, tps: int = 1_000, **more) -> BookingAsk:
    return BookingAsk(starts_at=start, ends_at=start + timedelta(hours=hours), output_tps=tps,
                      **more)


@pytest.fixture
def pool():
    # 10,000 x 0.9 = 9,000 guaranteeable.
    return PoolFactory(capacity_tps=10_000, guaranteeable_ratio=Decimal("0.900"))


@pytest.fixture
def org(pool):
    org = OrganizationFactory(status=OrgStatus.ACTIVE)
    AllocationFactory(org=org, pool=pool, guaranteed_tps=1_000, burst_tps=2_000)
    return org


def book(org, pool, a: BookingAsk) -> Booking:
    return booking_create(org=org, pool=pool, ask=a, actor="test")


@pytest.mark.parametrize(("change", "problem"), [
    # Each change is made from the valid window's start, taken when the test runs.
    (lambda s: {"starts_at": s - timedelta(hours=26)}, "in_past"),
    (lambda s: {"starts_at": slot(0)}, "in_past"),
    (lambda s: {"starts_at": s + timedelta(minutes=7)}, "misaligned"),
    (lambda s: {"starts_at": s + timedelta(seconds=30)}, "misaligned"),
    (lambda s: {"ends_at": s + timedelta(minutes=45)}, "too_short"),
    (lambda s: {"ends_at": s + timedelta(days=7, minutes=15)}, "too_long"),
    (lambda s: {"starts_at": s + timedelta(days=60, minutes=15)}, "too_far_ahead"),
    (lambda s: {"output_tps": 0}, "output_tps"),
    (lambda s: {"input_tps": 10}, "input_not_metered"),
    (lambda s: {"extra_daily_tokens": -1}, "extra_daily_tokens"),
])
def test_bad_input_is_refused_with_a_code_and_nothing_is_written(org, pool, change, problem):
    start = slot(24)
    base = {"starts_at": start, "ends_at": start + timedelta(hours=2), "output_tps": 500}
    base.update(change(start))
    if base["starts_at"] != start and "ends_at" not in change(start):
        base["ends_at"] = base["starts_at"] + timedelta(hours=2)
    with pytest.raises(DomainError) as refused:
        book(org, pool, BookingAsk(**base))
    assert (refused.value.status, refused.value.code) == (400, "invalid_booking")
    assert problem in refused.value.details["problems"]
    assert refused.value.fields
    assert not Booking.objects.exists()


def test_both_edges_of_length_and_horizon_are_accepted(org, pool):
    one_hour = book(org, pool, ask(slot(24), hours=1, tps=10))
    week = book(org, pool, ask(slot(48), hours=24 * 7, tps=10))
    far = slot(24 * 60 - 1)
    furthest = book(org, pool, ask(far, hours=1, tps=10))
    assert [b.pk for b in (one_hour, week, furthest)] == list(
        Booking.objects.order_by("pk").values_list("pk", flat=True))


def test_more_than_the_pool_could_ever_guarantee_is_422(org, pool):
    with pytest.raises(DomainError) as refused:
        book(org, pool, ask(slot(24), tps=9_001))
    assert (refused.value.status, refused.value.code) == (422, "booking_exceeds_pool")


def test_a_pool_without_an_allocation_is_403_and_one_ending_too_soon_is_422(pool):
    stranger = OrganizationFactory(status=OrgStatus.ACTIVE)
    with pytest.raises(DomainError) as refused:
        book(stranger, pool, ask(slot(24)))
    assert (refused.value.status, refused.value.code) == (403, "no_allocation")
    short = OrganizationFactory(status=OrgStatus.ACTIVE)
    AllocationFactory(org=short, pool=pool, valid_until=slot(25))
    with pytest.raises(DomainError) as refused:
        book(short, pool, ask(slot(24), hours=2))
    assert refused.value.code == "allocation_ends_before_window"
    assert not Booking.objects.exists()


def test_a_booking_fits_only_where_every_instant_has_room(org, pool):
    # 1,000 allocated; 8,000 free. Two overlapping bookings of 4,000 fill 10:00-11:00.
    start = slot(24)
    book(org, pool, ask(start, hours=2, tps=4_000))
    book(org, pool, ask(start + timedelta(hours=1), hours=2, tps=4_000))
    # 1 tok/s over the overlap is refused, with the window's free headroom.
    with pytest.raises(BookingNoRoom) as refused:
        book(org, pool, ask(start + timedelta(minutes=45), hours=1, tps=1))
    assert refused.value.status == 409
    assert refused.value.details["free_tps"] == 0
    # Beside the overlap 4,000 are free: exactly that fits, one more does not.
    with pytest.raises(BookingNoRoom) as refused:
        book(org, pool, ask(start - timedelta(hours=1), hours=2, tps=4_001))
    assert refused.value.details["free_tps"] == 4_000
    book(org, pool, ask(start - timedelta(hours=1), hours=2, tps=4_000))
    # Back to back with an edge: a window ending where another starts shares no instant.
    book(org, pool, ask(start + timedelta(hours=3), hours=1, tps=8_000))
    steps = ledger_steps(pool=pool, start=start - timedelta(hours=1),
                         end=start + timedelta(hours=4))
    assert max(s.output_tps for s in steps) == 9_000


def test_cancelled_and_ended_bookings_free_their_window(org, pool):
    start = slot(24)
    first = book(org, pool, ask(start, tps=8_000))
    with pytest.raises(BookingNoRoom):
        book(org, pool, ask(start, tps=1))
    booking_cancel(booking=first, actor="test")
    book(org, pool, ask(start, tps=8_000))


def test_an_org_cancels_before_the_start_only_an_operator_after(org, pool):
    booking = book(org, pool, ask(slot(24)))
    Booking.objects.filter(pk=booking.pk).update(starts_at=slot(-1, minutes=0),
                                                 ends_at=slot(2))
    with pytest.raises(DomainError) as refused:
        booking_cancel(booking=booking, actor="test")
    assert refused.value.code == "booking_started"
    booking = booking_cancel(booking=booking, actor="ops", by_operator=True, reason="incident")
    assert (booking.state, booking.cancelled_by_operator) == (BookingState.CANCELLED, True)
    with pytest.raises(DomainError) as refused:
        booking_cancel(booking=booking, actor="ops", by_operator=True)
    assert refused.value.code == "booking_not_cancellable"


def test_a_standing_grant_must_fit_under_future_bookings(org, pool):
    book(org, pool, ask(slot(24 * 3), tps=7_000))
    newcomer = OrganizationFactory(status=OrgStatus.ACTIVE)
    # Today 8,000 are free, but on day 3 only 1,000: a grant without end gets at most that.
    with pytest.raises(CapacityExhausted) as refused:
        allocation_grant(org=newcomer, pool=pool, guaranteed_tps=1_001, burst_tps=1_001,
                         daily_tokens=1, max_concurrency=1, actor="test")
    assert refused.value.details["free_tps"] == 1_000
    # An allocation that ends before the booking starts may take today's room.
    allocation_grant(org=newcomer, pool=pool, guaranteed_tps=5_000, burst_tps=5_000,
                     daily_tokens=1, max_concurrency=1, actor="test", valid_until=slot(24))


def test_changing_an_allocation_sees_bookings_including_a_longer_validity(org, pool):
    other = OrganizationFactory(status=OrgStatus.ACTIVE)
    allocation = AllocationFactory(org=other, pool=pool, guaranteed_tps=2_000, burst_tps=2_000,
                                   valid_until=slot(24))
    book(org, pool, ask(slot(48), tps=6_500))
    with pytest.raises(CapacityExhausted):
        allocation_change(allocation=allocation, actor="test", valid_until=slot(24 * 5))
    allocation_change(allocation=allocation, actor="test", guaranteed_tps=5_000,
                      burst_tps=5_000)  # until tomorrow: before the booking


def test_lowering_capacity_below_bookings_is_refused_then_breaks_what_is_named(org, pool):
    a = book(org, pool, ask(slot(24), tps=3_000))
    b = book(org, pool, ask(slot(24, minutes=60), tps=3_000))
    c = book(org, pool, ask(slot(24 * 5), tps=500))
    # 9,000 -> 5,400 guaranteeable: the overlap of a and b holds 1,000 + 6,000.
    with pytest.raises(CapacityBelowBookings) as refused:
        pool_capacity_set(pool=pool, capacity_tps=6_000, actor="ops")
    assert set(refused.value.details["conflicts"]) == {a.pk, b.pk}
    assert refused.value.details["excess_tps"] == 1_600
    pool.refresh_from_db()
    assert pool.capacity_tps == 10_000
    with pytest.raises(DomainError) as refused:
        pool_capacity_set(pool=pool, capacity_tps=6_000, actor="ops", break_bookings=[c.pk])
    assert refused.value.code == "booking_not_in_conflict"
    pool_capacity_set(pool=pool, capacity_tps=6_000, actor="ops", break_bookings=[a.pk],
                      reason="a rack failed")
    a.refresh_from_db()
    assert (a.state, a.cancelled_by_operator) == (BookingState.CANCELLED, True)
    assert "a rack failed" in a.cancel_reason
    assert Booking.objects.get(pk=b.pk).state == BookingState.CONFIRMED
    pool.refresh_from_db()
    assert pool.capacity_tps == 6_000


def test_conflicts_are_listed_before_anything_changes(org, pool):
    a = book(org, pool, ask(slot(24), tps=3_000))
    found = capacity_conflicts(pool=pool, guaranteeable_tps=3_500, guaranteeable_input_tps=None)
    assert [x.pk for x in found.bookings] == [a.pk]
    assert found.excess_tps == 500
    assert not capacity_conflicts(pool=pool, guaranteeable_tps=4_000,
                                  guaranteeable_input_tps=None)


def test_ending_an_allocation_cancels_the_bookings_the_operator_names(org, pool):
    booking = book(org, pool, ask(slot(24)))
    with pytest.raises(DomainError) as refused:
        allocation_end(allocation=org.allocations.get(), actor="ops", reason="offboarded")
    assert refused.value.code == "allocation_has_bookings"
    allocation_end(allocation=org.allocations.get(), actor="ops", reason="offboarded",
                   break_bookings=[booking.pk])
    booking.refresh_from_db()
    assert (booking.state, booking.cancelled_by_operator) == (BookingState.CANCELLED, True)


def test_free_series_is_the_least_free_of_each_bucket(org, pool):
    start = slot(24)
    book(org, pool, ask(start + timedelta(minutes=15), hours=1, tps=2_000))
    points = pool_free_series(pool=pool, start=start, end=start + timedelta(hours=3),
                              step=timedelta(hours=1))
    assert [p.output_tps for p in points] == [6_000, 6_000, 8_000]


def test_the_effective_guarantee_adds_bookings_in_force(org, pool):
    start = slot(24)
    book(org, pool, ask(start, hours=1, tps=500))
    assert org_guarantee_at(org_id=org.pk, pool_id=pool.pk, at=start - timedelta(seconds=1)) \
        == (1_000, 0)
    assert org_guarantee_at(org_id=org.pk, pool_id=pool.pk, at=start) == (1_500, 0)
    assert org_guarantee_at(org_id=org.pk, pool_id=pool.pk, at=start + timedelta(hours=1)) \
        == (1_000, 0)


def test_input_is_booked_apart_where_the_pool_has_prefill(org):
    pool = PoolFactory(capacity_tps=10_000, prefill_capacity_tps=20_000,
                       guaranteeable_ratio=Decimal("1.000"))
    AllocationFactory(org=org, pool=pool, guaranteed_tps=1_000, burst_tps=1_000,
                      guaranteed_input_tps=2_000, burst_input_tps=2_000)
    book(org, pool, ask(slot(24), tps=100, input_tps=18_000))
    with pytest.raises(BookingNoRoom) as refused:
        book(org, pool, ask(slot(24), tps=100, input_tps=1))
    assert refused.value.details["free_input_tps"] == 0
    assert refused.value.details["free_tps"] == 8_900


def test_the_beat_records_starts_and_ends_once(org, pool):
    booking = book(org, pool, ask(slot(24)))
    seen = []
    started = lambda booking: seen.append(("started", booking.pk))  # noqa: E731
    ended = lambda booking: seen.append(("ended", booking.pk))  # noqa: E731
    booking_started.subscribe(started)
    booking_ended.subscribe(ended)
    try:
        assert bookings_advance(now=booking.starts_at - timedelta(seconds=1)) == 0
        assert bookings_advance(now=booking.starts_at) == 1
        assert bookings_advance(now=booking.starts_at) == 0
        assert bookings_advance(now=booking.ends_at) == 1
    finally:
        booking_started.receivers.remove(started)
        booking_ended.receivers.remove(ended)
    assert seen == [("started", booking.pk), ("ended", booking.pk)]
    assert Booking.objects.get(pk=booking.pk).state == BookingState.ENDED
