"""The owner role: only owners grant, change or remove it (and invite owners); the last owner
stays. One rule (orgs/services/members.py) behind the REST API and the portal."""

import threading

import pytest
from django.db import connection
from rest_framework.test import APIClient

from orgs.models import AuditEvent, Invitation, Membership, Role
from orgs.services import membership_remove, membership_role_change
from sluice.errors import DomainError
from tests.factories import MembershipFactory, UserFactory
from tests.portal.conftest import portal_client, verified

pytestmark = pytest.mark.django_db


def _member(org, role) -> tuple[Membership, APIClient]:
    user = verified(UserFactory())
    membership = MembershipFactory(org=org, user=user, role=role)
    client = APIClient()
    client.force_authenticate(user)
    return membership, client


def _owner_membership(side) -> Membership:
    return Membership.objects.get(org=side.org, user=side.owner)


def test_an_admin_cannot_make_themselves_owner_then_remove_the_owner(two_orgs):
    a, _ = two_orgs
    admin, client = _member(a.org, Role.ADMIN)
    owner = _owner_membership(a)
    base = f"/api/v1/orgs/{a.org.pk}/members/"

    promote = client.patch(f"{base}{admin.pk}/", {"role": "owner"}, format="json")
    assert promote.status_code == 403
    assert promote.json()["error"]["code"] == "owner_required"
    remove = client.delete(f"{base}{owner.pk}/")
    assert remove.status_code == 403
    assert remove.json()["error"]["code"] == "owner_required"
    demote = client.patch(f"{base}{owner.pk}/", {"role": "viewer"}, format="json")
    assert demote.status_code == 403

    assert Membership.objects.get(pk=admin.pk).role == Role.ADMIN
    assert Membership.objects.get(pk=owner.pk).role == Role.OWNER
    assert not AuditEvent.objects.filter(action__startswith="membership.").exists()


def test_an_admin_cannot_invite_an_owner_but_may_invite_other_roles(two_orgs):
    a, _ = two_orgs
    _admin, client = _member(a.org, Role.ADMIN)
    url = f"/api/v1/orgs/{a.org.pk}/invitations/"
    refused = client.post(url, {"email": "boss@x.test", "role": "owner"}, format="json")
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "owner_required"
    assert not Invitation.objects.filter(email="boss@x.test").exists()
    assert client.post(url, {"email": "dev@x.test", "role": "admin"},
                       format="json").status_code == 201
    # Nor through the members list: the same rule, whatever the door.
    accomplice = UserFactory(email="accomplice@x.test")
    added = client.post(f"/api/v1/orgs/{a.org.pk}/members/",
                        {"email": accomplice.email, "role": "owner"}, format="json")
    assert added.status_code == 403
    assert not Membership.objects.filter(user=accomplice).exists()


def test_an_admin_still_manages_everyone_who_is_not_an_owner(two_orgs):
    a, _ = two_orgs
    _admin, client = _member(a.org, Role.ADMIN)
    developer, _ = _member(a.org, Role.DEVELOPER)
    url = f"/api/v1/orgs/{a.org.pk}/members/{developer.pk}/"
    assert client.patch(url, {"role": "admin"}, format="json").status_code == 200
    assert client.delete(url).status_code == 204


def test_an_owner_grants_and_gives_up_the_owner_role_but_the_last_one_stays(two_orgs):
    a, _ = two_orgs
    admin, admin_client = _member(a.org, Role.ADMIN)
    owner = _owner_membership(a)
    base = f"/api/v1/orgs/{a.org.pk}/members/"

    assert a.client.patch(f"{base}{admin.pk}/", {"role": "owner"},
                          format="json").status_code == 200
    # Two owners: the new one may demote the first, who may not come back on their own.
    assert admin_client.patch(f"{base}{owner.pk}/", {"role": "admin"},
                              format="json").status_code == 200
    assert a.client.patch(f"{base}{owner.pk}/", {"role": "owner"},
                          format="json").status_code == 403
    # One owner left: neither demoted nor removed, not even by themselves.
    last = admin_client.patch(f"{base}{admin.pk}/", {"role": "admin"}, format="json")
    assert last.status_code == 409 and last.json()["error"]["code"] == "last_owner"
    assert admin_client.delete(f"{base}{admin.pk}/").status_code == 409
    assert Membership.objects.get(pk=admin.pk).role == Role.OWNER


def test_an_operator_may_change_owners(two_orgs, operator_client):
    a, _ = two_orgs
    admin, _ = _member(a.org, Role.ADMIN)
    url = f"/api/v1/orgs/{a.org.pk}/members/{admin.pk}/"
    assert operator_client.patch(url, {"role": "owner"}, format="json").status_code == 200
    owner = _owner_membership(a)
    assert operator_client.delete(
        f"/api/v1/orgs/{a.org.pk}/members/{owner.pk}/").status_code == 204


def test_the_portal_applies_the_same_rule(two_orgs, redis_client):
    a, _ = two_orgs
    admin, _ = _member(a.org, Role.ADMIN)
    owner = _owner_membership(a)
    client = portal_client(admin.user)
    slug = a.org.slug

    page = client.post(f"/portal/o/{slug}/members/{admin.pk}/role/", {"role": "owner"},
                       follow=True).content.decode()
    assert "Only an owner can" in page
    client.post(f"/portal/o/{slug}/members/{owner.pk}/remove/")
    client.post(f"/portal/o/{slug}/members/{owner.pk}/role/", {"role": "viewer"})
    client.post(f"/portal/o/{slug}/members/invite/", {"email": "boss@x.test", "role": "owner"})
    assert Membership.objects.get(pk=admin.pk).role == Role.ADMIN
    assert Membership.objects.get(pk=owner.pk).role == Role.OWNER
    assert not Invitation.objects.filter(email="boss@x.test").exists()


def test_the_portal_offers_owner_controls_to_owners_only(two_orgs, redis_client):
    a, _ = two_orgs
    admin, _ = _member(a.org, Role.ADMIN)
    owner = _owner_membership(a)
    slug = a.org.slug
    as_admin = portal_client(admin.user).get(f"/portal/o/{slug}/members/").content.decode()
    assert f'action="/portal/o/{slug}/members/{owner.pk}/remove/"' not in as_admin
    assert '<option value="owner"' not in as_admin
    verified(a.owner)
    as_owner = portal_client(a.owner).get(f"/portal/o/{slug}/members/").content.decode()
    assert f'action="/portal/o/{slug}/members/{admin.pk}/remove/"' in as_owner
    assert '<option value="owner"' in as_owner


@pytest.mark.django_db(transaction=True)
def test_two_owners_demoting_each_other_at_once_leave_one_owner(two_orgs):
    a, _ = two_orgs
    second = MembershipFactory(org=a.org, user=UserFactory(), role=Role.OWNER)
    first = _owner_membership(a)
    pairs = [(first, second), (second, first)]  # (target, actor)
    barrier, outcomes = threading.Barrier(2), []

    def demote(i: int) -> None:
        target, actor = pairs[i]
        barrier.wait()
        try:
            if i == 0:
                membership_role_change(membership=target, role=Role.ADMIN, actor=actor.user)
            else:
                membership_remove(membership=target, actor=actor.user)
            outcomes.append("done")
        except DomainError as error:
            outcomes.append(error.code)
        finally:
            connection.close()

    threads = [threading.Thread(target=demote, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # The loser sees either the last owner or that it is no longer an owner itself.
    assert sorted(outcomes)[0] == "done" and outcomes.count("done") == 1
    assert Membership.objects.filter(org=a.org, role=Role.OWNER).count() == 1
