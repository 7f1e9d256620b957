"""Booking capacity in a real browser: an org owner quotes and confirms a window from the portal
and sees it with its cost; an operator finds it on the pool's calendar, types a lower capacity,
sees at once the booking it would break, ticks it and sets the capacity. Each main page is
checked at 1366 and 390 px with axe-core."""

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import Group, Permission
from playwright.sync_api import expect

from billing.models import BookingCharge
from billing.services import booking_confirm
from console.permissions import groups_sync
from orgs.models import Role
from portal.models import VerifiedEmail
from quotas.bookings import BookingAsk
from quotas.models import Booking, BookingState
from tests.e2e.conftest import main_page
from tests.factories import (
    PASSWORD,
    AllocationFactory,
    MembershipFactory,
    OrganizationFactory,
    PoolFactory,
    UserFactory,
)
from tests.totp import totp_code, totp_device_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _window(days: int = 2, hours: int = 4) -> tuple[datetime, datetime]:
    start = (datetime.now(UTC) + timedelta(days=days)).replace(hour=14, minute=0, second=0,
                                                               microsecond=0)
    return start, start + timedelta(hours=hours)


def test_an_owner_quotes_and_books_a_window_from_the_portal(new_page):
    pool = PoolFactory(model="frontier-fast", region="us-east", capacity_tps=10_000)
    org = OrganizationFactory(name="Launch Co", slug="launch-co")
    AllocationFactory(org=org, pool=pool, guaranteed_tps=1_000, burst_tps=2_000)
    other = OrganizationFactory(name="Busy Co")
    AllocationFactory(org=other, pool=pool, guaranteed_tps=1_000, burst_tps=1_000)
    start, end = _window()
    booking_confirm(org=other, pool=pool, actor="test", ask=BookingAsk(
        starts_at=start + timedelta(days=1), ends_at=end + timedelta(days=1), output_tps=4_000))
    owner = UserFactory(username="owner@launch.test", email="owner@launch.test")
    MembershipFactory(org=org, user=owner, role=Role.OWNER)
    VerifiedEmail.objects.create(user=owner, email=owner.email)
    page = new_page()

    page.goto("/portal/login/")
    page.get_by_label("Email").fill(owner.username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Book capacity").click()
    expect(page.get_by_role("heading", name="Book capacity", exact=True)).to_be_visible()
    main_page(page, "portal-bookings")
    page.get_by_role("link", name=str(pool)).click()
    expect(page.locator("figure[data-chart='free']")).to_be_visible()

    page.get_by_label("Starts (UTC)").fill(start.strftime("%Y-%m-%dT%H:%M"))
    page.get_by_label("Ends (UTC)").fill(end.strftime("%Y-%m-%dT%H:%M"))
    page.get_by_label("Extra guaranteed output tokens/s").fill("3000")
    page.get_by_role("button", name="Get a quote").click()
    expect(page.locator("[data-quote-amount]")).to_have_text("$240.00")
    main_page(page, "portal-booking-quote")
    page.get_by_role("button", name="Confirm the booking for $240.00").click()

    booking = Booking.objects.get(org=org)
    row = page.locator(f"[data-booking='{booking.pk}']")
    expect(row).to_contain_text("$240.00")
    expect(row.locator("[data-state]")).to_have_text("Confirmed")
    main_page(page, "portal-booking-pool")
    assert (booking.starts_at, booking.ends_at, booking.output_tps) == (start, end, 3_000)
    assert BookingCharge.objects.get(booking=booking).amount_micros == 240_000_000


def _operator_signed_in_and_a_booking(new_page):
    """An operator signed in to the console, and Launch Co's confirmed booking of 5,000
    tokens/s in a pool of 10,000."""
    groups_sync(group_model=Group, permission_model=Permission)
    operator = UserFactory(username="ops@sluice.dev", is_staff=True)
    operator.groups.add(Group.objects.get(name="operator"))
    device = totp_device_for(operator)
    pool = PoolFactory(model="frontier-fast", region="us-east", capacity_tps=10_000)
    org = OrganizationFactory(name="Launch Co")
    AllocationFactory(org=org, pool=pool, guaranteed_tps=1_000, burst_tps=1_000)
    start, end = _window()
    booking = booking_confirm(org=org, pool=pool, actor="test", ask=BookingAsk(
        starts_at=start, ends_at=end, output_tps=5_000))
    page = new_page()

    page.goto("/admin/")
    page.get_by_label("Email").fill(operator.username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_label("Authentication code").fill(totp_code(device))
    page.get_by_role("button", name="Sign in").click()
    return page, pool, org, booking


def test_an_operator_reads_the_calendar_and_breaks_a_booking_to_lower_capacity(new_page):
    page, pool, _org, booking = _operator_signed_in_and_a_booking(new_page)
    page.get_by_role("link", name="Pools", exact=True).click()
    page.get_by_role("link", name="Calendar: guarantees, bookings and free capacity").click()
    expect(page.get_by_role("heading", name=f"Calendar of {pool}")).to_be_visible()
    expect(page.locator(f"[data-booking='{booking.pk}']")).to_contain_text("Launch Co")
    main_page(page, "console-pool-calendar")

    # 6,000 x 0.9 = 5,400 guaranteeable: the booking's hours need 6,000.
    page.get_by_label("Decode capacity, output tokens/s").fill("6000")
    conflict = page.locator(f"[data-conflict='{booking.pk}']")
    expect(conflict).to_be_visible()
    main_page(page, "console-pool-calendar-conflicts")
    page.get_by_label("Reason", exact=True).fill("a rack is down")
    page.get_by_role("button", name="Set capacity").click()
    expect(page.locator("[data-conflicts]")).to_contain_text("cannot hold")
    page.locator(f"[data-conflict='{booking.pk}']").check()
    page.get_by_role("button", name="Set capacity").click()
    expect(page.locator(".alert-success")).to_contain_text("1 booking cancelled and refunded")
    booking.refresh_from_db()
    assert booking.state == BookingState.CANCELLED

    page.get_by_role("link", name="Bookings", exact=True).click()
    expect(page.get_by_role("heading", name="Bookings", exact=True)).to_be_visible()
    main_page(page, "console-bookings")


def test_an_operator_suspends_an_org_only_by_ticking_the_bookings_it_breaks(new_page):
    page, _pool, org, booking = _operator_signed_in_and_a_booking(new_page)
    page.goto(f"/admin/console/orgs/{org.pk}/")
    ticked = page.locator(f"#lifecycle [data-booking='{booking.pk}']")
    expect(ticked).to_be_visible()
    main_page(page, "console-org-bookings-to-break")

    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Suspend").click()
    expect(page.locator("#lifecycle .alert-error")).to_contain_text("being suspended breaks them")
    org.refresh_from_db()
    assert org.status == "active"

    page.locator(f"#lifecycle [data-booking='{booking.pk}']").check()
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Suspend").click()
    expect(page.locator("#lifecycle .alert-success")).to_contain_text("suspended")
    booking.refresh_from_db()
    assert (booking.state, booking.cancelled_by_operator) == (BookingState.CANCELLED, True)
    assert BookingCharge.objects.get(booking=booking).refund_micros > 0
