"""POST .../members/ invites: nobody is added without accepting, and the answer is the same
whether the address has an account or not."""

import pytest
from django.core import mail

from orgs.models import Invitation, Membership
from orgs.services import invitation_accept
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def _token(message) -> str:
    link = next(w for w in message.body.split() if "/invitations/" in w)
    return link.rstrip("/").split("/")[-1]


def _shape(body: dict) -> dict:
    """The answer without what differs by construction (id, address, times)."""
    return {k: v for k, v in body.items() if k not in {"id", "email", "created_at",
                                                        "expires_at"}}


def test_an_existing_user_is_invited_not_added_and_the_answer_says_nothing_more(
        two_orgs, django_capture_on_commit_callbacks):
    a, _ = two_orgs
    someone = UserFactory(email="someone@x.test")
    url = f"/api/v1/orgs/{a.org.pk}/members/"
    with django_capture_on_commit_callbacks(execute=True):
        known = a.client.post(url, {"email": "someone@x.test", "role": "developer"},
                              format="json")
        unknown = a.client.post(url, {"email": "nobody@x.test", "role": "developer"},
                                format="json")
    assert known.status_code == unknown.status_code == 202
    assert _shape(known.json()) == _shape(unknown.json()) == {
        "role": "developer", "accepted_at": None, "revoked_at": None}
    assert set(known.json()) == set(unknown.json())
    assert not Membership.objects.filter(user=someone).exists()
    assert sorted(m.to[0] for m in mail.outbox) == ["nobody@x.test", "someone@x.test"]

    invitation_accept(token=_token(next(m for m in mail.outbox if m.to == ["someone@x.test"])),
                      user=someone)
    assert Membership.objects.get(user=someone, org=a.org).role == "developer"


def test_a_current_member_is_not_invited_again(two_orgs):
    a, _ = two_orgs
    response = a.client.post(f"/api/v1/orgs/{a.org.pk}/members/",
                             {"email": a.owner.email.upper(), "role": "viewer"}, format="json")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "already_member"
    assert not Invitation.objects.exists()


def test_the_other_org_gets_404(two_orgs):
    a, b = two_orgs
    response = b.client.post(f"/api/v1/orgs/{a.org.pk}/members/",
                             {"email": "x@x.test", "role": "viewer"}, format="json")
    assert response.status_code == 404
    assert not Invitation.objects.exists()
