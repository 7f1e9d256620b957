"""The portal's booking pages: free capacity as a chart, quote then confirm, the org's
bookings with state and cost, cancel; who may see and do what."""

from datetime import UTC, datetime, timedelta

import pytest

from billing.models import BookingCharge
from orgs.models import Role
from quotas.models import Booking, BookingState
from tests.factories import AllocationFactory, MembershipFactory, PoolFactory, UserFactory
from tests.portal.conftest import portal_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def booked(orgs):
    a, _ = orgs
    pool = PoolFactory(model="frontier", capacity_tps=10_000)
    AllocationFactory(org=a.org, pool=pool, guaranteed_tps=1_000, burst_tps=2_000)
    return a, pool


def window(hours_ahead=48, hours=2):
    start = (datetime.now(UTC) + timedelta(hours=hours_ahead)).replace(minute=0, second=0,
                                                                       microsecond=0)
    return start, start + timedelta(hours=hours)


def form(start, end, tps=3_000, **more) -> dict:
    return {"starts_at": start.strftime("%Y-%m-%dT%H:%M"),
            "ends_at": end.strftime("%Y-%m-%dT%H:%M"), "output_tps": tps,
            "extra_daily_tokens": 0, **more}


def test_quote_then_confirm_then_cancel(booked, django_assert_max_num_queries):
    a, pool = booked
    slug = a.org.slug
    index = a.client.get(f"/portal/o/{slug}/bookings/").content.decode()
    assert "Book capacity" in index and f'data-pool="{pool.pk}"' in index
    with django_assert_max_num_queries(12):
        page = a.client.get(f"/portal/o/{slug}/bookings/pools/{pool.pk}/")
    assert page.status_code == 200
    assert 'data-chart="free"' in page.content.decode()
    assert "Free to book, next 14 days" in page.content.decode()

    start, end = window()
    quoted = a.client.post(f"/portal/o/{slug}/bookings/pools/{pool.pk}/",
                           form(start, end, action="quote"))
    assert quoted.status_code == 200
    body = quoted.content.decode()
    assert 'data-quote="120000000"' in body and "$120.00" in body  # 3,000 x 2 h x $0.02
    assert not Booking.objects.exists()

    confirmed = a.client.post(f"/portal/o/{slug}/bookings/pools/{pool.pk}/",
                              form(start, end, action="confirm", quote_micros=120_000_000))
    assert confirmed.status_code == 302
    booking = Booking.objects.get()
    assert (booking.starts_at, booking.ends_at, booking.output_tps) == (start, end, 3_000)
    listed = a.client.get(confirmed["Location"]).content.decode()
    assert f'data-booking="{booking.pk}"' in listed and 'data-state="confirmed"' in listed
    assert "$120.00" in listed and "Booked:" in listed

    a.client.post(f"/portal/o/{slug}/bookings/{booking.pk}/cancel/")
    booking.refresh_from_db()
    assert booking.state == BookingState.CANCELLED
    assert BookingCharge.objects.get(booking=booking).refund_micros == 120_000_000


def test_refusals_show_on_the_form_and_write_nothing(booked):
    a, pool = booked
    url = f"/portal/o/{a.org.slug}/bookings/pools/{pool.pk}/"
    start, end = window()
    misaligned = a.client.post(url, form(start + timedelta(minutes=7), end, action="quote"))
    assert misaligned.status_code == 400
    assert "quarter hour" in misaligned.content.decode()
    too_big = a.client.post(url, form(start, end, tps=9_001, action="confirm"))
    assert too_big.status_code == 422
    a.client.post(url, form(start, end, tps=8_000, action="confirm"))
    full = a.client.post(url, form(start, end, tps=1, action="quote")).content.decode()
    assert "Not enough room" in full and "Confirm the booking" not in full
    no_room = a.client.post(url, form(start, end, tps=1, action="confirm"))
    assert no_room.status_code == 409
    moved = a.client.post(url, form(*window(72), tps=1, action="confirm", quote_micros=1))
    assert moved.status_code == 409 and "quote again" in moved.content.decode()
    assert Booking.objects.count() == 1


def test_other_orgs_and_other_roles(booked, orgs):
    a, pool = booked
    _, b = orgs
    start, end = window()
    a.client.post(f"/portal/o/{a.org.slug}/bookings/pools/{pool.pk}/",
                  form(start, end, action="confirm"))
    booking = Booking.objects.get()
    # Another org: its own slug has no such pool, and A's pages are not its own.
    assert b.client.get(f"/portal/o/{b.org.slug}/bookings/pools/{pool.pk}/").status_code == 404
    assert b.client.get(f"/portal/o/{a.org.slug}/bookings/").status_code == 404
    assert b.client.post(f"/portal/o/{b.org.slug}/bookings/{booking.pk}/cancel/"
                         ).status_code == 404
    # A billing member reads; a developer does not see the page at all.
    for role, status, sees_form in ((Role.BILLING, 200, False), (Role.DEVELOPER, 404, False),
                                    (Role.ADMIN, 200, True)):
        user = UserFactory()
        MembershipFactory(org=a.org, user=user, role=role)
        client = portal_client(user)
        page = client.get(f"/portal/o/{a.org.slug}/bookings/pools/{pool.pk}/")
        assert page.status_code == status
        if status == 200:
            assert ("Get a quote" in page.content.decode()) == sees_form
            nav = client.get(f"/portal/o/{a.org.slug}/usage/").content.decode()
            assert "Book capacity" in nav
    billing = UserFactory()
    MembershipFactory(org=a.org, user=billing, role=Role.BILLING)
    refused = portal_client(billing).post(f"/portal/o/{a.org.slug}/bookings/pools/{pool.pk}/",
                                          form(*window(72), action="confirm"))
    assert refused.status_code == 404
    assert Booking.objects.count() == 1


def test_the_quotas_page_shows_a_booking_in_force_on_top_of_the_allocation(booked):
    a, pool = booked
    start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    Booking.objects.create(org=a.org, pool=pool, starts_at=start - timedelta(hours=1),
                           ends_at=start + timedelta(hours=3), output_tps=3_000,
                           state=BookingState.ACTIVE)
    Booking.objects.create(org=a.org, pool=pool, starts_at=start + timedelta(days=2),
                           ends_at=start + timedelta(days=2, hours=3), output_tps=500)
    page = a.client.get(f"/portal/o/{a.org.slug}/quotas/").content.decode()
    shown = page.split('data-field="booked_tps"')[1].split("</p>")[0]
    assert "3,000 guaranteed tokens/s" in shown and "4,000 tokens/s" in shown
    assert (start + timedelta(hours=3)).strftime("%Y-%m-%d %H:%M") in shown
