"""The bookings REST API: quote then confirm, list, cancel, availability, with the session and
the org's admin key; roles; another org's bookings are 404; operators list and cancel; bad input
is a 4xx with a code and writes nothing."""

from datetime import UTC, datetime, timedelta

import pytest
from rest_framework.test import APIClient

from billing.models import BookingCharge
from orgs.models import Role
from orgs.services import admin_key_create
from portal.models import VerifiedEmail
from quotas.models import Booking, BookingState
from tests.factories import AllocationFactory, MembershipFactory, PoolFactory, UserFactory

pytestmark = pytest.mark.django_db


def slot(hours: float) -> datetime:
    at = datetime.now(UTC) + timedelta(hours=hours)
    return at.replace(minute=at.minute - at.minute % 15, second=0, microsecond=0)


@pytest.fixture
def pool():
    return PoolFactory(capacity_tps=10_000)


@pytest.fixture
def alpha(two_orgs, pool):
    a, _ = two_orgs
    AllocationFactory(org=a.org, pool=pool, guaranteed_tps=1_000, burst_tps=2_000)
    return a


def body(pool, start=None, hours=4, tps=3_000, **more) -> dict:
    start = start or slot(48)
    return {"pool": pool.pk, "starts_at": start.isoformat(),
            "ends_at": (start + timedelta(hours=hours)).isoformat(), "output_tps": tps, **more}


def test_quote_then_confirm_list_and_cancel(alpha, pool):
    client, org = alpha.client, alpha.org
    quoted = client.post(f"/api/v1/orgs/{org.pk}/bookings/quote/", body(pool), format="json")
    assert quoted.status_code == 200, quoted.content
    quote = quoted.json()
    assert (quote["amount_micros"], quote["fits"], quote["free_tps"], quote["hours"]) == (
        240_000_000, True, 8_000, 4.0)
    assert "24 hours" in quote["refund_rule"]
    assert not Booking.objects.exists()

    made = client.post(f"/api/v1/orgs/{org.pk}/bookings/",
                       body(pool, quote_micros=quote["amount_micros"]), format="json")
    assert made.status_code == 201, made.content
    booking = made.json()
    assert (booking["state"], booking["cost_micros"], booking["refund_micros"]) == (
        "confirmed", 240_000_000, None)
    listed = client.get(f"/api/v1/orgs/{org.pk}/bookings/").json()
    assert [b["id"] for b in listed["results"]] == [booking["id"]]
    assert client.get(f"/api/v1/orgs/{org.pk}/bookings/{booking['id']}/").json() == booking

    cancelled = client.post(f"/api/v1/orgs/{org.pk}/bookings/{booking['id']}/cancel/")
    assert cancelled.status_code == 200
    assert (cancelled.json()["state"], cancelled.json()["refund_micros"],
            cancelled.json()["cancelled_by"]) == ("cancelled", 240_000_000, "organization")
    again = client.post(f"/api/v1/orgs/{org.pk}/bookings/{booking['id']}/cancel/")
    assert (again.status_code, again.json()["error"]["code"]) == (409,
                                                                   "booking_not_cancellable")


def test_another_org_sees_404_everywhere(alpha, two_orgs, pool):
    _, bravo = two_orgs
    made = alpha.client.post(f"/api/v1/orgs/{alpha.org.pk}/bookings/", body(pool),
                             format="json").json()
    for path in (f"/api/v1/orgs/{alpha.org.pk}/bookings/",
                 f"/api/v1/orgs/{alpha.org.pk}/bookings/{made['id']}/",
                 f"/api/v1/orgs/{alpha.org.pk}/pools/{pool.pk}/availability/"):
        assert bravo.client.get(path).status_code == 404
    assert bravo.client.post(f"/api/v1/orgs/{alpha.org.pk}/bookings/{made['id']}/cancel/"
                             ).status_code == 404
    assert bravo.client.get(f"/api/v1/orgs/{bravo.org.pk}/bookings/{made['id']}/"
                            ).status_code == 404
    # Bravo holds no allocation in the pool: no availability, no booking.
    assert bravo.client.get(f"/api/v1/orgs/{bravo.org.pk}/pools/{pool.pk}/availability/"
                            ).status_code == 404
    refused = bravo.client.post(f"/api/v1/orgs/{bravo.org.pk}/bookings/", body(pool),
                                format="json")
    assert (refused.status_code, refused.json()["error"]["code"]) == (403, "no_allocation")
    assert Booking.objects.count() == 1


@pytest.mark.parametrize(("role", "reads", "books"), [
    (Role.ADMIN, 200, 201), (Role.BILLING, 200, 403), (Role.DEVELOPER, 403, 403),
])
def test_roles(alpha, pool, role, reads, books):
    user = UserFactory()
    MembershipFactory(org=alpha.org, user=user, role=role)
    client = APIClient()
    client.force_authenticate(user)
    assert client.get(f"/api/v1/orgs/{alpha.org.pk}/bookings/").status_code == reads
    assert client.post(f"/api/v1/orgs/{alpha.org.pk}/bookings/", body(pool),
                       format="json").status_code == books


def test_an_admin_key_books_with_its_creators_rights(alpha, pool):
    org = alpha.org
    _, secret = admin_key_create(org=org, name="ci", actor=alpha.owner)
    keyed = APIClient()
    keyed.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    on_the_hour = slot(48).replace(minute=0)
    made = keyed.post(f"/api/v1/orgs/{org.pk}/bookings/", body(pool, start=on_the_hour),
                      format="json")
    assert made.status_code == 201, made.content
    assert keyed.get(f"/api/v1/orgs/{org.pk}/bookings/").json()["count"] == 1
    hours = keyed.get(f"/api/v1/orgs/{org.pk}/pools/{pool.pk}/availability/",
                      {"days": 3}).json()
    assert len(hours) == 72
    assert all(h["free_tps"] in (8_000, 5_000) for h in hours)
    assert sum(1 for h in hours if h["free_tps"] == 5_000) == 4
    billing_user = UserFactory()
    MembershipFactory(org=org, user=billing_user, role=Role.BILLING)
    VerifiedEmail.objects.create(user=billing_user, email=billing_user.email)
    _, reader_secret = admin_key_create(org=org, name="finance", actor=billing_user)
    reader = APIClient()
    reader.credentials(HTTP_AUTHORIZATION=f"Bearer {reader_secret}")
    assert reader.get(f"/api/v1/orgs/{org.pk}/bookings/").status_code == 200
    refused = reader.post(f"/api/v1/orgs/{org.pk}/bookings/", body(pool), format="json")
    assert (refused.status_code, refused.json()["error"]["code"]) == (403, "role_not_allowed")


@pytest.mark.parametrize(("change", "status", "code"), [
    ({"starts_at": "2020-01-01T10:00:00Z", "ends_at": "2020-01-01T12:00:00Z"}, 400,
     "invalid_booking"),
    ({"starts_at": slot(48).replace(minute=7).isoformat()}, 400, "invalid_booking"),
    ({"ends_at": (slot(48) + timedelta(minutes=30)).isoformat()}, 400, "invalid_booking"),
    ({"ends_at": (slot(48) + timedelta(days=8)).isoformat()}, 400, "invalid_booking"),
    ({"starts_at": slot(24 * 70).isoformat(),
      "ends_at": (slot(24 * 70) + timedelta(hours=1)).isoformat()}, 400, "invalid_booking"),
    ({"output_tps": 0}, 400, "invalid_input"),
    ({"output_tps": "lots"}, 400, "invalid_input"),
    ({"starts_at": "tuesday"}, 400, "invalid_input"),
    ({"pool": 999_999}, 400, "invalid_input"),
    ({"output_tps": 9_001}, 422, "booking_exceeds_pool"),
    ({"input_tps": 5}, 400, "invalid_booking"),
])
def test_bad_input_answers_a_code_and_writes_nothing(alpha, pool, change, status, code):
    data = body(pool, start=slot(48), hours=2)
    data.update(change)
    for path in ("bookings/quote/", "bookings/"):
        answer = alpha.client.post(f"/api/v1/orgs/{alpha.org.pk}/{path}", data, format="json")
        assert (answer.status_code, answer.json()["error"]["code"]) == (status, code), \
            answer.content
    assert not Booking.objects.exists() and not BookingCharge.objects.exists()


def test_no_room_is_409_with_the_free_headroom_and_the_quote_says_so(alpha, pool):
    client, org = alpha.client, alpha.org
    assert client.post(f"/api/v1/orgs/{org.pk}/bookings/", body(pool, tps=7_000),
                       format="json").status_code == 201
    quote = client.post(f"/api/v1/orgs/{org.pk}/bookings/quote/", body(pool, tps=1_001),
                        format="json").json()
    assert (quote["fits"], quote["free_tps"]) == (False, 1_000)
    refused = client.post(f"/api/v1/orgs/{org.pk}/bookings/", body(pool, tps=1_001),
                          format="json")
    assert refused.status_code == 409
    error = refused.json()["error"]
    assert (error["code"], error["details"]["free_tps"]) == ("booking_no_room", 1_000)
    assert Booking.objects.count() == 1


def test_operators_list_and_cancel_with_a_reason(alpha, pool, operator_client):
    made = alpha.client.post(f"/api/v1/orgs/{alpha.org.pk}/bookings/", body(pool),
                             format="json").json()
    listed = operator_client.get("/api/v1/operator/bookings/", {"pool": pool.pk}).json()
    assert [b["id"] for b in listed["results"]] == [made["id"]]
    assert operator_client.post(f"/api/v1/operator/bookings/{made['id']}/cancel/", {},
                                format="json").status_code == 400  # a reason is required
    cancelled = operator_client.post(f"/api/v1/operator/bookings/{made['id']}/cancel/",
                                     {"reason": "maintenance"}, format="json").json()
    assert (cancelled["state"], cancelled["cancelled_by"], cancelled["refund_micros"]) == (
        "cancelled", "operator", 240_000_000)
    assert alpha.client.get("/api/v1/operator/bookings/").status_code == 403


def test_capacity_below_bookings_shows_the_conflicts_then_breaks_the_named(alpha, pool,
                                                                          operator_client):
    made = alpha.client.post(f"/api/v1/orgs/{alpha.org.pk}/bookings/", body(pool, tps=5_000),
                             format="json").json()
    conflicts = operator_client.get(f"/api/v1/pools/{pool.pk}/capacity/conflicts/",
                                    {"capacity_tps": 6_000}).json()
    assert [c["id"] for c in conflicts["conflicts"]] == [made["id"]]
    assert conflicts["excess_tps"] == 6_000 - 5_400
    refused = operator_client.post(f"/api/v1/pools/{pool.pk}/capacity/",
                                   {"capacity_tps": 6_000}, format="json")
    assert refused.status_code == 422
    assert refused.json()["error"]["details"]["conflicts"] == [made["id"]]
    done = operator_client.post(f"/api/v1/pools/{pool.pk}/capacity/",
                                {"capacity_tps": 6_000, "break_bookings": [made["id"]],
                                 "reason": "rack down"}, format="json")
    assert done.status_code == 200, done.content
    booking = Booking.objects.get(pk=made["id"])
    assert (booking.state, booking.cancelled_by_operator) == (BookingState.CANCELLED, True)
    assert BookingCharge.objects.get(booking=booking).refund_micros == 5_000 * 4 * 20_000
