"""The console's bookings: each pool's calendar, the bookings list, an operator's cancel with a
reason, and a capacity change that shows the bookings it breaks at once."""

from datetime import UTC, datetime, timedelta

import pytest

from billing.models import BookingCharge
from billing.services import booking_confirm
from quotas.bookings import BookingAsk
from quotas.models import Booking, BookingState
from quotas.services import pool_capacity_set
from sluice.models import OutboundEmail
from tests.factories import AllocationFactory, OrganizationFactory, PoolFactory, RolloutWaveFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def pool():
    return PoolFactory(model="frontier", capacity_tps=10_000)  # 9,000 guaranteeable


@pytest.fixture
def booked(pool):
    org = OrganizationFactory(name="Launch Co")
    AllocationFactory(org=org, pool=pool, guaranteed_tps=1_000, burst_tps=1_000)
    start = (datetime.now(UTC) + timedelta(days=2)).replace(minute=0, second=0, microsecond=0)
    booking = booking_confirm(org=org, pool=pool, actor="test", ask=BookingAsk(
        starts_at=start, ends_at=start + timedelta(hours=4), output_tps=5_000))
    return booking


def test_the_calendar_shows_guarantees_bookings_changes_and_free(operator_console, pool, booked,
                                                                  django_assert_max_num_queries):
    RolloutWaveFactory(pool=pool, capacity_tps=2_000, name="GA 2")
    pool_capacity_set(pool=pool, capacity_tps=11_000, actor="ops", reason="new rack")
    with django_assert_max_num_queries(20):
        page = operator_console.get(f"/admin/console/pools/{pool.pk}/calendar/")
    assert page.status_code == 200
    body = page.content.decode()
    assert f'data-chart="calendar{pool.pk}"' in body
    assert f'data-booking="{booked.pk}"' in body and "Launch Co" in body
    assert "GA 2" in body and "not sold until it opens" in body
    assert "10,000 → 11,000" in body and "new rack" in body
    # 9,900 guaranteeable; at the booking's hours 1,000 + 5,000 are guaranteed.
    assert 'data-free-least>3,900' in body
    pools = operator_console.get("/admin/console/pools/").content.decode()
    assert f"/admin/console/pools/{pool.pk}/calendar/" in pools


def test_lowering_capacity_shows_conflicts_at_once_and_breaks_only_the_ticked(
        operator_console, pool, booked):
    preview = operator_console.get(f"/admin/console/pools/{pool.pk}/capacity/conflicts/",
                                   {"capacity_tps": 6_000}).content.decode()
    assert f'data-conflict="{booked.pk}"' in preview and "Launch Co" in preview
    fine = operator_console.get(f"/admin/console/pools/{pool.pk}/capacity/conflicts/",
                                {"capacity_tps": 7_000}).content.decode()
    assert 'data-conflicts="0"' in fine
    url = f"/admin/console/pools/{pool.pk}/calendar/capacity/"
    refused = operator_console.post(url, {"capacity_tps": 6_000, "reason": "rack down"})
    assert refused.status_code == 422
    assert f'data-conflict="{booked.pk}"' in refused.content.decode()
    pool.refresh_from_db()
    assert pool.capacity_tps == 10_000
    done = operator_console.post(url, {"capacity_tps": 6_000, "reason": "rack down",
                                       "break_bookings": [booked.pk]})
    assert done.status_code == 302
    booked.refresh_from_db()
    assert (booked.state, booked.cancelled_by_operator) == (BookingState.CANCELLED, True)
    assert BookingCharge.objects.get(booking=booked).refund_micros == 400_000_000
    assert OutboundEmail.objects.filter(kind="billing.booking_cancelled").exists()


def test_the_list_filters_and_an_operator_cancels_with_a_reason(operator_console, booked):
    page = operator_console.get("/admin/console/bookings/").content.decode()
    assert f'data-booking="{booked.pk}"' in page
    cancelled = operator_console.get("/admin/console/bookings/", {"state": "cancelled"})
    assert f'data-booking="{booked.pk}"' not in cancelled.content.decode()
    url = f"/admin/console/bookings/{booked.pk}/cancel/"
    operator_console.post(url, {"reason": " "})
    assert Booking.objects.get(pk=booked.pk).state == BookingState.CONFIRMED
    response = operator_console.post(url, {"reason": "capacity needed for an incident"})
    assert response.status_code == 302
    booked.refresh_from_db()
    assert booked.cancel_reason == "capacity needed for an incident"
    assert booked.state == BookingState.CANCELLED


def test_support_reads_and_changes_nothing(support_console, pool, booked):
    assert support_console.get(f"/admin/console/pools/{pool.pk}/calendar/").status_code == 200
    assert support_console.get("/admin/console/bookings/").status_code == 200
    assert support_console.post(f"/admin/console/bookings/{booked.pk}/cancel/",
                                {"reason": "x"}).status_code == 403
    assert support_console.post(f"/admin/console/pools/{pool.pk}/calendar/capacity/",
                                {"capacity_tps": 6_000}).status_code == 403
    assert Booking.objects.get(pk=booked.pk).state == BookingState.CONFIRMED
