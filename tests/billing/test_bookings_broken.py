"""Every change that takes from a sold booking what it relies on follows one rule: refused, or
the operator names every booking it breaks and those are cancelled with a full refund and a
notice. The changes: an allocation ended or given a sooner end, an org suspended (by an operator
or for payment) or offboarded, a capacity lowered (tests/quotas/test_bookings_ledger.py). The
same service answers the REST API, the console and the admin."""

from datetime import UTC, datetime, timedelta

import pytest

from billing.models import BillingAccount, BookingCharge
from billing.services import booking_confirm, dunning_enforce
from orgs.models import OrgStatus, SuspensionReason
from orgs.services import org_offboard, org_suspend, org_transition
from quotas.bookings import BookingAsk
from quotas.models import Allocation, AllocationStatus, Booking, BookingState
from quotas.services import allocation_change, allocation_end, allocations_expire
from sluice.errors import DomainError
from sluice.models import OutboundEmail
from tests.billing.test_bookings_race import _race
from tests.factories import AllocationFactory, MembershipFactory, OrganizationFactory
from tests.totp import console_client

pytestmark = pytest.mark.django_db


def slot(hours: float) -> datetime:
    at = datetime.now(UTC) + timedelta(hours=hours)
    return at.replace(minute=at.minute - at.minute % 15, second=0, microsecond=0)


@pytest.fixture
def org(pool):
    org = OrganizationFactory(name="Launch Co")
    AllocationFactory(org=org, pool=pool, guaranteed_tps=1_000, burst_tps=2_000,
                      valid_until=slot(24 * 30))
    MembershipFactory(org=org)
    return org


def book(org, pool, start_hours: float = 48, hours: int = 4, tps: int = 1_000) -> Booking:
    start = slot(start_hours)
    return booking_confirm(org=org, pool=pool, actor="test", ask=BookingAsk(
        starts_at=start, ends_at=start + timedelta(hours=hours), output_tps=tps))


def assert_broken(*bookings: Booking) -> None:
    """Cancelled as a change of the pool, refunded in full, the org told."""
    for booking in bookings:
        booking.refresh_from_db()
        assert (booking.state, booking.cancelled_by_operator) == (BookingState.CANCELLED, True)
        charge = BookingCharge.objects.get(booking=booking)
        assert charge.refund_micros == charge.amount_micros > 0
    assert OutboundEmail.objects.filter(kind="billing.booking_cancelled").count() == len(bookings)


def assert_intact(*bookings: Booking) -> None:
    for booking in bookings:
        booking.refresh_from_db()
        assert booking.state == BookingState.CONFIRMED
        assert BookingCharge.objects.get(booking=booking).refunded_at is None
    assert not OutboundEmail.objects.filter(kind="billing.booking_cancelled").exists()


def refused(code: str, call) -> DomainError:
    with pytest.raises(DomainError) as caught:
        call()
    assert caught.value.code == code, caught.value.message
    return caught.value


# --- An allocation given a sooner end ---------------------------------------------------------

def test_a_sooner_end_below_a_booking_is_refused_until_named(org, pool):
    allocation = org.allocations.get()
    early, late = book(org, pool, 48), book(org, pool, 24 * 10)
    until = slot(24 * 5)
    error = refused("allocation_ends_before_bookings", lambda: allocation_change(
        allocation=allocation, actor="ops", valid_until=until))
    assert (error.status, error.details["conflicts"]) == (422, [late.pk])
    assert Allocation.objects.get(pk=allocation.pk).valid_until == slot(24 * 30)
    refused("booking_not_in_conflict", lambda: allocation_change(
        allocation=allocation, actor="ops", valid_until=until, break_bookings=[early.pk]))
    assert_intact(early, late)
    allocation_change(allocation=allocation, actor="ops", valid_until=until,
                      break_bookings=[late.pk], reason="contract ends")
    assert Allocation.objects.get(pk=allocation.pk).valid_until == until
    assert_broken(late)
    early.refresh_from_db()
    assert early.state == BookingState.CONFIRMED
    assert "contract ends" in Booking.objects.get(pk=late.pk).cancel_reason


def test_a_sooner_end_after_every_booking_needs_no_name(org, pool):
    allocation = org.allocations.get()
    booking = book(org, pool, 48, hours=4)
    allocation_change(allocation=allocation, actor="ops", valid_until=booking.ends_at)
    assert_intact(booking)
    refused("booking_not_in_conflict", lambda: allocation_change(
        allocation=allocation, actor="ops", guaranteed_tps=900, break_bookings=[booking.pk]))


# --- An allocation ended ----------------------------------------------------------------------

def test_ending_an_allocation_with_bookings_is_refused_until_all_are_named(org, pool):
    allocation = org.allocations.get()
    a, b = book(org, pool, 48), book(org, pool, 72)
    error = refused("allocation_has_bookings",
                    lambda: allocation_end(allocation=allocation, actor="ops"))
    assert error.details["conflicts"] == [a.pk, b.pk]
    refused("allocation_has_bookings", lambda: allocation_end(
        allocation=allocation, actor="ops", break_bookings=[a.pk]))
    assert Allocation.objects.get(pk=allocation.pk).status == AllocationStatus.ACTIVE
    assert_intact(a, b)
    allocation_end(allocation=allocation, actor="ops", break_bookings=[a.pk, b.pk])
    assert Allocation.objects.get(pk=allocation.pk).status == AllocationStatus.ENDED
    assert_broken(a, b)


def test_the_expiry_beat_breaks_what_still_relies_on_an_expired_allocation(org, pool):
    booking = book(org, pool, 1)
    # Data from before the rule: the allocation's end moved under the booking behind the
    # services' back.
    Allocation.objects.filter(org=org).update(valid_until=datetime.now(UTC) - timedelta(
        seconds=1), valid_from=datetime.now(UTC) - timedelta(days=1))
    assert allocations_expire() == 1
    assert_broken(booking)


# --- An organization suspended or offboarded --------------------------------------------------

@pytest.mark.parametrize("service", [org_suspend, org_offboard])
def test_suspending_or_offboarding_with_bookings_is_refused_until_all_are_named(
        org, pool, service):
    a, b = book(org, pool, 48), book(org, pool, 72)
    error = refused("org_has_bookings", lambda: service(org=org, actor="ops", reason="abuse"))
    assert (error.status, error.details["conflicts"]) == (422, [a.pk, b.pk])
    org.refresh_from_db()
    assert org.status == OrgStatus.ACTIVE
    assert_intact(a, b)
    service(org=org, actor="ops", reason="abuse", break_bookings=[a.pk, b.pk])
    org.refresh_from_db()
    assert org.status in (OrgStatus.SUSPENDED, OrgStatus.OFFBOARDED)
    assert_broken(a, b)
    assert "abuse" in Booking.objects.get(pk=a.pk).cancel_reason


def test_other_transitions_name_no_booking(org, pool):
    booking = book(org, pool, 48)
    org_suspend(org=org, actor="ops", break_bookings=[booking.pk])
    refused("booking_not_in_conflict", lambda: org_transition(
        org=org, action="restore", actor="ops", break_bookings=[booking.pk]))


def test_a_booking_ended_since_it_was_named_is_no_mistake_another_is(org, pool):
    live = book(org, pool, 48)
    past = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    ended = Booking.objects.create(org=org, pool=pool, starts_at=past - timedelta(hours=2),
                                   ends_at=past, output_tps=10)
    other = OrganizationFactory()
    AllocationFactory(org=other, pool=pool, guaranteed_tps=100, burst_tps=100)
    theirs = book(other, pool, 48, tps=10)
    refused("booking_not_in_conflict", lambda: org_suspend(
        org=org, actor="ops", break_bookings=[live.pk, theirs.pk]))
    org_suspend(org=org, actor="ops", break_bookings=[live.pk, ended.pk])
    assert_broken(live)


def test_a_suspension_for_payment_breaks_the_bookings_itself(org, pool,
                                                             django_capture_on_commit_callbacks):
    booking = book(org, pool, 48)
    now = datetime.now(UTC)
    BillingAccount.objects.update_or_create(org=org, defaults={
        "payment_failed_at": now - timedelta(days=8), "grace_until": now - timedelta(days=1)})
    with django_capture_on_commit_callbacks(execute=True):
        assert dunning_enforce() == 1
    org.refresh_from_db()
    assert (org.status, org.suspension_reason) == (OrgStatus.SUSPENDED,
                                                   SuspensionReason.PAYMENT)
    assert_broken(booking)


# --- Races: a booking confirmed while its allocation ends -------------------------------------

@pytest.mark.django_db(transaction=True)
def test_a_booking_and_the_end_of_its_allocation_never_leave_a_booking_without_one(pool):
    for _round in range(4):
        org = OrganizationFactory()
        allocation = AllocationFactory(org=org, pool=pool, guaranteed_tps=100, burst_tps=100)
        results = {}

        def confirm(org=org, results=results):
            try:
                results["book"] = book(org, pool, 48, tps=10).pk
            except DomainError as error:
                results["book"] = error.code

        def end(allocation=allocation, results=results):
            try:
                results["end"] = allocation_end(allocation=allocation, actor="ops").status
            except DomainError as error:
                results["end"] = error.code

        _race([confirm, end])
        ended = Allocation.objects.get(pk=allocation.pk).status == AllocationStatus.ENDED
        live = Booking.objects.filter(org=org, state=BookingState.CONFIRMED).exists()
        # One wins: the end refused because it saw the booking, or the booking refused
        # because it saw the end. Never both through.
        assert not (ended and live), results
        assert (live, results["end"]) == (True, "allocation_has_bookings") or (
            results == {"book": "no_allocation", "end": "ended"}), results


# --- Through REST, the console and the admin: the same service --------------------------------

def test_rest_names_the_conflicts_then_breaks_the_named(org, pool, operator_client):
    allocation = org.allocations.get()
    booking = book(org, pool, 48)
    url = f"/api/v1/allocations/{allocation.pk}/"
    sooner = {"valid_until": slot(24).isoformat()}
    answer = operator_client.patch(url, sooner, format="json")
    assert answer.status_code == 422
    assert answer.json()["error"]["code"] == "allocation_ends_before_bookings"
    assert answer.json()["error"]["details"]["conflicts"] == [booking.pk]
    answer = operator_client.post(f"{url}end/", {}, format="json")
    assert (answer.status_code, answer.json()["error"]["code"]) == (
        422, "allocation_has_bookings")
    answer = operator_client.post(f"/api/v1/orgs/{org.pk}/transitions/",
                                  {"action": "suspend"}, format="json")
    assert (answer.status_code, answer.json()["error"]["code"]) == (422, "org_has_bookings")
    assert_intact(booking)
    answer = operator_client.post(f"/api/v1/orgs/{org.pk}/transitions/",
                                  {"action": "suspend", "break_bookings": [booking.pk]},
                                  format="json")
    assert answer.status_code == 200, answer.content
    assert_broken(booking)


def test_rest_ends_an_allocation_naming_its_bookings(org, pool, operator_client):
    allocation = org.allocations.get()
    booking = book(org, pool, 48)
    answer = operator_client.post(f"/api/v1/allocations/{allocation.pk}/end/",
                                  {"break_bookings": [booking.pk]}, format="json")
    assert answer.status_code == 200, answer.content
    assert_broken(booking)


@pytest.fixture
def operator_console(redis_client):
    # The console's operator group (the console's own tests hold the same fixture).
    from tests.console.conftest import _staff_in
    return console_client(_staff_in("operator"))


def test_the_console_lists_what_a_change_breaks_and_breaks_only_when_ticked(
        org, pool, operator_console):
    allocation = org.allocations.get()
    booking = book(org, pool, 48)
    page = operator_console.get(f"/admin/console/allocations/{allocation.pk}/").content.decode()
    assert f'data-booking="{booking.pk}"' in page
    end = f"/admin/console/allocations/{allocation.pk}/end/"
    answer = operator_console.post(end, {"reason": "contract"}, follow=True)
    assert "rely on this allocation" in answer.content.decode()
    assert Allocation.objects.get(pk=allocation.pk).status == AllocationStatus.ACTIVE
    assert_intact(booking)

    org_page = operator_console.get(f"/admin/console/orgs/{org.pk}/").content.decode()
    assert f'data-booking="{booking.pk}"' in org_page
    lifecycle = f"/admin/console/orgs/{org.pk}/lifecycle/"
    answer = operator_console.post(lifecycle, {"action": "suspend"}, follow=True)
    assert "being suspended breaks them" in answer.content.decode()
    org.refresh_from_db()
    assert org.status == OrgStatus.ACTIVE

    operator_console.post(end, {"reason": "contract", "break_bookings": [booking.pk]})
    assert Allocation.objects.get(pk=allocation.pk).status == AllocationStatus.ENDED
    assert_broken(booking)


def test_the_admin_action_is_refused_while_bookings_rely_on_the_allocation(org, pool, operator):
    allocation = org.allocations.get()
    book(org, pool, 48)
    answer = console_client(operator).post("/admin/quotas/allocation/", {
        "action": "end", "_selected_action": [allocation.pk]}, follow=True)
    assert "rely on this allocation" in answer.content.decode()
    assert Allocation.objects.get(pk=allocation.pk).status == AllocationStatus.ACTIVE
    answer = console_client(operator).post("/admin/orgs/organization/", {
        "action": "action_org_suspend", "_selected_action": [org.pk]}, follow=True)
    assert "being suspended breaks them" in answer.content.decode()
    org.refresh_from_db()
    assert org.status == OrgStatus.ACTIVE
