"""An admin key carries its creator's rights, read at each request, and dies with the
creator's membership. A key no person made acts as an org admin: usage and API keys, no
money."""

from importlib import import_module

import pytest
from django.apps import apps
from rest_framework.test import APIClient

from orgs.models import AdminKey, AuditEvent, Membership, Role
from orgs.services import admin_key_create, membership_remove, membership_role_change
from portal.models import VerifiedEmail
from tests.factories import MembershipFactory, UserFactory
from tests.portal.conftest import portal_client

pytestmark = pytest.mark.django_db

WINDOW = {"start_time": 1_790_000_000, "end_time": 1_790_086_400}


def _person(org, role):
    user = UserFactory()
    membership = MembershipFactory(org=org, user=user, role=role)
    VerifiedEmail.objects.create(user=user, email=user.email)
    return membership


def _client(secret: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


def _can(client, org) -> dict[str, int]:
    base = f"/api/v1/orgs/{org.pk}"
    return {
        "usage": client.get(f"{base}/usage/completions", WINDOW).status_code,
        "costs": client.get(f"{base}/costs", WINDOW).status_code,
        "list_keys": client.get(f"{base}/api-keys/").status_code,
        "create_key": client.post(f"{base}/api-keys/", {"name": "k"},
                                  format="json").status_code,
    }


def test_an_admins_key_reads_no_costs_an_owners_does(two_orgs):
    a, _ = two_orgs
    admin = _person(a.org, Role.ADMIN)
    _, admins = admin_key_create(org=a.org, name="dash", actor=admin.user)
    _, owners = admin_key_create(org=a.org, name="finance", actor=a.owner)
    assert _can(_client(admins), a.org) == {"usage": 200, "costs": 404, "list_keys": 200,
                                            "create_key": 201}
    assert _can(_client(owners), a.org) == {"usage": 200, "costs": 200, "list_keys": 200,
                                            "create_key": 201}


def test_the_rights_follow_the_creators_current_role(two_orgs):
    a, _ = two_orgs
    admin = _person(a.org, Role.ADMIN)
    _, secret = admin_key_create(org=a.org, name="dash", actor=admin.user)
    client = _client(secret)
    membership_role_change(membership=admin, role=Role.VIEWER, actor=a.owner)
    refused = client.post(f"/api/v1/orgs/{a.org.pk}/api-keys/", {"name": "k"}, format="json")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "role_not_allowed"
    assert client.get(f"/api/v1/orgs/{a.org.pk}/api-keys/").status_code == 200
    membership_role_change(membership=admin, role=Role.BILLING, actor=a.owner)
    assert _can(client, a.org)["costs"] == 200


def test_a_creator_who_leaves_takes_the_keys_along(two_orgs):
    a, _ = two_orgs
    admin, other = _person(a.org, Role.ADMIN), _person(a.org, Role.ADMIN)
    mine, secret = admin_key_create(org=a.org, name="mine", actor=admin.user)
    theirs, other_secret = admin_key_create(org=a.org, name="theirs", actor=other.user)
    membership_remove(membership=admin, actor=a.owner)

    mine.refresh_from_db()
    assert mine.revoked_at is not None
    event = AuditEvent.objects.get(action="admin_key.revoke", target_id=str(mine.pk))
    assert event.reason == "its creator left the organization"
    assert _client(secret).get(f"/api/v1/orgs/{a.org.pk}/api-keys/").status_code == 401
    assert _client(other_secret).get(f"/api/v1/orgs/{a.org.pk}/api-keys/").status_code == 200
    theirs.refresh_from_db()
    assert theirs.revoked_at is None


def test_a_creator_who_leaves_through_the_portal_too(two_orgs, redis_client):
    a, _ = two_orgs
    admin = _person(a.org, Role.ADMIN)
    page = portal_client(admin.user).post(f"/portal/o/{a.org.slug}/admin-keys/",
                                          {"name": "dash"})
    assert page.status_code == 201
    portal_client(admin.user).post(f"/portal/o/{a.org.slug}/members/{admin.pk}/remove/")
    assert not Membership.objects.filter(pk=admin.pk).exists()
    assert AdminKey.objects.get().revoked_at is not None


def test_a_deactivated_creators_key_is_refused(two_orgs):
    a, _ = two_orgs
    _, secret = admin_key_create(org=a.org, name="finance", actor=a.owner)
    a.owner.is_active = False
    a.owner.save()
    assert _client(secret).get(f"/api/v1/orgs/{a.org.pk}/api-keys/").status_code == 401


def test_a_key_nobody_made_acts_as_an_admin(two_orgs):
    a, _ = two_orgs
    _, secret = admin_key_create(org=a.org, name="seeded", actor="manage.py shell")
    assert _can(_client(secret), a.org) == {"usage": 200, "costs": 404, "list_keys": 200,
                                            "create_key": 201}


def test_the_portal_says_what_each_key_acts_as(two_orgs, redis_client):
    a, _ = two_orgs
    admin = _person(a.org, Role.ADMIN)
    admin_key_create(org=a.org, name="dash", actor=admin.user)
    admin_key_create(org=a.org, name="seeded", actor="script")
    page = portal_client(a.owner).get(f"/portal/o/{a.org.slug}/admin-keys/").content.decode()
    assert "<td data-acts-as>Admin</td>" in page
    assert "<td data-acts-as>Admin (no creator)</td>" in page


def test_the_migration_revokes_keys_of_creators_who_already_left(two_orgs):
    a, b = two_orgs
    gone = _person(a.org, Role.ADMIN)
    departed, _ = admin_key_create(org=a.org, name="departed", actor=gone.user)
    staying, _ = admin_key_create(org=a.org, name="staying", actor=a.owner)
    creatorless, _ = admin_key_create(org=a.org, name="script", actor="script")
    Membership.objects.filter(pk=gone.pk).delete()  # left before keys followed their creator
    import_module("orgs.migrations.0008_admin_keys_of_departed_creators").departed_revoke(
        apps, None)
    revoked = set(AdminKey.objects.filter(revoked_at__isnull=False).values_list("pk",
                                                                                flat=True))
    assert revoked == {departed.pk}
    assert AuditEvent.objects.filter(action="admin_key.revoke", actor_label="system",
                                     target_id=str(departed.pk)).exists()
