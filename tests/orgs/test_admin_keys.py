"""Admin keys (`sk_admin_...`): hashed, shown once, one org's, audited, rate-limited; they
authenticate the org-facing API (usage, costs, API keys) and never authorize inference."""

import pytest
from django.test import Client
from rest_framework.test import APIClient

from orgs.models import AdminKey, ApiKey, AuditEvent, Role
from orgs.services import admin_key_create, admin_key_revoke, api_key_create
from sluice.secrets import secret_digest
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db


def admin_client(plaintext: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
    return client


@pytest.fixture
def keyed(two_orgs):
    """Org A and B, each with an inference key and an admin key; A's admin client."""
    a, b = two_orgs
    for side in (a, b):
        side.api_key, _ = api_key_create(org=side.org, name="inference", actor=side.owner)
        side.admin_key, side.admin_secret = admin_key_create(org=side.org, name="dashboards",
                                                             actor=side.owner)
    return a, b, admin_client(a.admin_secret)


def test_admin_key_is_prefixed_hashed_and_audited(two_orgs):
    a, _ = two_orgs
    key, secret = admin_key_create(org=a.org, name=" ci ", actor=a.owner)
    assert secret.startswith(f"sk_admin_{key.lookup}_")
    assert key.digest == secret_digest(secret) and secret not in key.digest
    assert key.name == "ci" and key.display_prefix == f"sk_admin_{key.lookup}"
    admin_key_revoke(key=key, actor=a.owner)
    assert list(AuditEvent.objects.filter(org=a.org, target_id=str(key.pk))
                .values_list("action", flat=True).order_by("id")) == [
        "admin_key.create", "admin_key.revoke"]


def test_admin_key_reads_and_manages_its_orgs_keys(keyed):
    a, _, client = keyed
    listed = client.get(f"/api/v1/orgs/{a.org.pk}/api-keys/")
    assert listed.status_code == 200
    assert [k["id"] for k in listed.json()["results"]] == [a.api_key.pk]
    created = client.post(f"/api/v1/orgs/{a.org.pk}/api-keys/", {"name": "rotated"},
                          format="json")
    assert created.status_code == 201
    assert created.json()["secret"].startswith("sk_")
    new = ApiKey.objects.get(pk=created.json()["id"])
    revoked = client.post(f"/api/v1/orgs/{a.org.pk}/api-keys/{a.api_key.pk}/revoke/")
    assert revoked.status_code == 200 and revoked.json()["revoked_at"]
    actors = set(AuditEvent.objects.filter(org=a.org, action__startswith="api_key.",
                                           target_id__in=[str(new.pk), str(a.api_key.pk)])
                 .exclude(actor_label=a.owner.username).values_list("actor_label", flat=True))
    assert actors == {f"admin_key:{a.admin_key.display_prefix}"}
    assert client.get(f"/api/v1/orgs/{a.org.pk}/").json()["id"] == a.org.pk


def test_admin_key_accepts_no_limit_fields_yet(keyed):
    """The seam for per-key limits (the admission issue): unknown fields are ignored, so a
    client sending them learns nothing was set from the answer, which has no such fields."""
    a, _, client = keyed
    body = client.post(f"/api/v1/orgs/{a.org.pk}/api-keys/", {"name": "x", "tps_limit": 5},
                       format="json").json()
    assert "tps_limit" not in body


def test_org_a_admin_key_never_reaches_org_b(keyed):
    a, b, client = keyed
    base = f"/api/v1/orgs/{b.org.pk}"
    requests = [
        ("get", f"{base}/", None),
        ("get", f"{base}/api-keys/", None),
        ("post", f"{base}/api-keys/", {"name": "intruder"}),
        ("post", f"{base}/api-keys/{b.api_key.pk}/revoke/", None),
        ("get", f"{base}/usage/completions?start_time=0", None),
        ("get", f"{base}/costs?start_time=0", None),
        # B's objects under A's own org id: not A's either.
        ("post", f"/api/v1/orgs/{a.org.pk}/api-keys/{b.api_key.pk}/revoke/", None),
    ]
    for method, url, body in requests:
        response = getattr(client, method)(url, body, format="json")
        assert response.status_code == 404, (method, url, response.content)
        assert response.json()["error"]["code"] == "not_found"
    b.api_key.refresh_from_db()
    assert b.api_key.revoked_at is None
    assert not ApiKey.objects.filter(org=b.org, name="intruder").exists()


def test_admin_key_is_no_credential_for_other_endpoints(keyed):
    a, _, client = keyed
    for url in (f"/api/v1/orgs/{a.org.pk}/members/", "/api/v1/orgs/",
                f"/api/v1/orgs/{a.org.pk}/billing/invoices"):
        assert client.get(url).status_code == 401, url


def test_revoked_or_forged_admin_keys_are_refused(keyed):
    a, _, client = keyed
    url = f"/api/v1/orgs/{a.org.pk}/api-keys/"
    forged = admin_client(a.admin_secret[:-4] + "AAAA")
    assert forged.get(url).status_code == 401
    admin_key_revoke(key=a.admin_key, actor=a.owner)
    answer = client.get(url)
    assert answer.status_code == 401
    assert answer.json()["error"]["code"] == "authentication_failed"


def test_admin_keys_are_rate_limited_per_key(keyed, settings, redis_client):
    a, _, client = keyed
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK,
                               "DEFAULT_THROTTLE_RATES": {"admin_key": "3/min"}}
    url = f"/api/v1/orgs/{a.org.pk}/api-keys/"
    assert [client.get(url).status_code for _ in range(3)] == [200, 200, 200]
    refused = client.get(url)
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "throttled" and refused["Retry-After"]
    _, other = admin_key_create(org=a.org, name="second", actor=a.owner)
    assert admin_client(other).get(url).status_code == 200  # per key, not per org
    a.client.get(url)  # members' sessions are not counted
    assert a.client.get(url).status_code == 200


def test_members_list_their_orgs_keys_in_constant_queries(keyed, django_assert_num_queries):
    a, _, client = keyed
    for n in range(5):
        api_key_create(org=a.org, name=f"k{n}", actor=a.owner)
    client.get(f"/api/v1/orgs/{a.org.pk}/api-keys/")  # last_used_at written once a minute
    # key lookup (with org), count, page of keys (with creators)
    with django_assert_num_queries(3):
        assert len(client.get(f"/api/v1/orgs/{a.org.pk}/api-keys/").json()["results"]) == 6


def test_only_owners_and_admins_manage_admin_keys_in_the_portal(two_orgs):
    a, _ = two_orgs
    developer = UserFactory()
    MembershipFactory(org=a.org, user=developer, role=Role.DEVELOPER)
    browser = Client()
    browser.force_login(developer)
    assert browser.get(f"/portal/o/{a.org.slug}/admin-keys/").status_code == 403
    owner = Client()
    owner.force_login(a.owner)
    page = owner.post(f"/portal/o/{a.org.slug}/admin-keys/", {"name": "grafana"})
    assert page.status_code == 201
    key = AdminKey.objects.get(org=a.org)
    assert key.display_prefix in page.content.decode()
    secret_shown = page.context["secret"]
    assert secret_shown.startswith(key.display_prefix)
    assert secret_shown not in owner.get(f"/portal/o/{a.org.slug}/admin-keys/").content.decode()
    revoked = owner.post(f"/portal/o/{a.org.slug}/admin-keys/{key.pk}/revoke/")
    assert revoked.status_code == 302
    key.refresh_from_db()
    assert key.revoked_at is not None
