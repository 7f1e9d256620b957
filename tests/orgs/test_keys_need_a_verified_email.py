"""A member creates keys only with a confirmed email address, over the REST API as in the
portal: one rule (the orgs service announces key_creating; the portal, which owns the
confirmation, refuses)."""

import pytest
from rest_framework.test import APIClient

from orgs.models import AdminKey, ApiKey, Role
from orgs.services import admin_key_create, api_key_create
from portal.models import VerifiedEmail
from sluice.errors import PermissionDenied
from tests.factories import MembershipFactory, UserFactory
from tests.portal.conftest import portal_client

pytestmark = pytest.mark.django_db


def _developer(org, *, confirmed: bool):
    user = UserFactory()
    MembershipFactory(org=org, user=user, role=Role.DEVELOPER)
    if confirmed:
        VerifiedEmail.objects.create(user=user, email=user.email)
    client = APIClient()
    client.force_authenticate(user)
    return user, client


def test_the_rest_api_refuses_a_member_whose_address_is_unconfirmed(two_orgs):
    a, _ = two_orgs
    _user, client = _developer(a.org, confirmed=False)
    response = client.post(f"/api/v1/orgs/{a.org.pk}/api-keys/", {"name": "x"}, format="json")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "email_unverified"
    assert not ApiKey.objects.filter(org=a.org).exists()


def test_a_confirmed_member_creates_one(two_orgs):
    a, _ = two_orgs
    _user, client = _developer(a.org, confirmed=True)
    response = client.post(f"/api/v1/orgs/{a.org.pk}/api-keys/", {"name": "x"}, format="json")
    assert response.status_code == 201


def test_an_address_changed_after_confirming_must_be_confirmed_again(two_orgs):
    a, _ = two_orgs
    user, client = _developer(a.org, confirmed=True)
    user.email = "elsewhere@x.test"
    user.save()
    response = client.post(f"/api/v1/orgs/{a.org.pk}/api-keys/", {"name": "x"}, format="json")
    assert response.status_code == 403


def test_admin_keys_need_a_confirmed_address_too(two_orgs, redis_client):
    a, _ = two_orgs
    admin = UserFactory()
    MembershipFactory(org=a.org, user=admin, role=Role.ADMIN)
    with pytest.raises(PermissionDenied):
        admin_key_create(org=a.org, name="dash", actor=admin)
    page = portal_client(admin).post(f"/portal/o/{a.org.slug}/admin-keys/", {"name": "dash"})
    assert page.status_code == 403 and "Confirm your email address" in page.content.decode()
    assert not AdminKey.objects.exists()


def test_operators_and_commands_are_not_members(two_orgs, operator_client, operator):
    a, _ = two_orgs
    assert operator_client.post(f"/api/v1/orgs/{a.org.pk}/api-keys/", {"name": "ops"},
                                format="json").status_code == 201
    api_key_create(org=a.org, name="seeded", actor="manage.py seed_demo")
    assert ApiKey.objects.filter(org=a.org).count() == 2
