"""Org A never reads or changes org B's data: every org-scoped endpoint answers 404 to A's
owner for B's objects, exactly as for objects that do not exist."""

import pytest

from orgs.models import Membership
from orgs.services import api_key_create, invitation_create
from quotas.quota_requests import quota_request_create
from tests.factories import AllocationFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def b_objects(two_orgs):
    _, b = two_orgs
    key, _ = api_key_create(org=b.org, name="b-key", actor=b.owner)
    member = Membership.objects.get(org=b.org)
    allocation = AllocationFactory(org=b.org)
    quota_request = quota_request_create(
        org=b.org, pool=allocation.pool, guaranteed_tps=20, burst_tps=40, daily_tokens=2_000,
        max_concurrency=2, reason="more", actor=b.owner)
    invitation, _ = invitation_create(org=b.org, email="x@b.test", role="viewer", actor=b.owner)
    return {"org": b.org.pk, "key": key.pk, "member": member.pk, "allocation": allocation.pk,
            "invitation": invitation.pk, "quota_request": quota_request.pk}


def org_scoped_requests(ids):
    org = ids["org"]
    return [
        ("get", f"/api/v1/orgs/{org}/", None),
        ("post", f"/api/v1/orgs/{org}/transitions/", {"action": "suspend"}),
        ("get", f"/api/v1/orgs/{org}/members/", None),
        ("post", f"/api/v1/orgs/{org}/members/", {"email": "a@b.c", "role": "viewer"}),
        ("patch", f"/api/v1/orgs/{org}/members/{ids['member']}/", {"role": "viewer"}),
        ("delete", f"/api/v1/orgs/{org}/members/{ids['member']}/", None),
        ("post", f"/api/v1/orgs/{org}/invitations/", {"email": "a@b.c", "role": "viewer"}),
        ("get", f"/api/v1/orgs/{org}/invitations/", None),
        ("post", f"/api/v1/orgs/{org}/invitations/{ids['invitation']}/revoke/", None),
        ("get", f"/api/v1/orgs/{org}/api-keys/", None),
        ("post", f"/api/v1/orgs/{org}/api-keys/", {"name": "stolen"}),
        ("post", f"/api/v1/orgs/{org}/api-keys/{ids['key']}/revoke/", None),
        ("get", f"/api/v1/allocations/{ids['allocation']}/", None),
        ("patch", f"/api/v1/allocations/{ids['allocation']}/", {"guaranteed_tps": 1}),
        ("post", f"/api/v1/allocations/{ids['allocation']}/end/", {}),
        ("put", f"/api/v1/orgs/{org}/api-keys/{ids['key']}/limits/", {}),
        ("get", f"/api/v1/orgs/{org}/quota-requests/", None),
        ("post", f"/api/v1/orgs/{org}/quota-requests/{ids['quota_request']}/cancel/", {}),
        ("get", f"/api/v1/orgs/{org}/billing/invoices", None),
        ("put", f"/api/v1/orgs/{org}/billing/spend-cap", {"spend_cap_micros": 1}),
    ]


def test_every_org_scoped_endpoint_hides_other_orgs(two_orgs, b_objects):
    a, _ = two_orgs
    for method, url, body in org_scoped_requests(b_objects):
        response = getattr(a.client, method)(url, body, format="json")
        assert response.status_code == 404, (method, url, response.status_code)
        assert response.json()["error"]["code"] == "not_found"


def test_b_objects_untouched(two_orgs, b_objects):
    a, b = two_orgs
    for method, url, body in org_scoped_requests(b_objects):
        getattr(a.client, method)(url, body, format="json")
    b.org.refresh_from_db()
    assert b.org.status == "active"
    assert b.org.api_keys.filter(revoked_at__isnull=True).count() == 1
    assert Membership.objects.filter(org=b.org).count() == 1


def test_allocation_list_is_scoped(two_orgs, b_objects):
    a, _ = two_orgs
    AllocationFactory(org=a.org)
    results = a.client.get("/api/v1/allocations/").json()["results"]
    assert [r["org"] for r in results] == [a.org.pk]


def test_anonymous_gets_401_everywhere(anon_client, b_objects):
    for method, url, body in org_scoped_requests(b_objects):
        response = getattr(anon_client, method)(url, body, format="json")
        assert response.status_code in (401, 403), url
        assert response.json()["error"]["code"] in ("not_authenticated", "authentication_failed")


def test_other_orgs_objects_answer_exactly_like_missing_ones(two_orgs, b_objects):
    """Not just 404: the same body, so the message does not tell "exists, not yours" from
    "does not exist" (an allocation must not say "No such organization.")."""
    a, _ = two_orgs
    missing = {name: 10**9 + i for i, name in enumerate(b_objects)}
    for (method, url, body), (_, missing_url, _) in zip(
            org_scoped_requests(b_objects), org_scoped_requests(missing), strict=True):
        theirs = getattr(a.client, method)(url, body, format="json")
        absent = getattr(a.client, method)(missing_url, body, format="json")
        assert (theirs.status_code, theirs.json()) == (absent.status_code, absent.json()), url
