import re

import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.test import Client

from orgs.models import Membership, Organization, OrgStatus, Role
from orgs.services import invitation_create
from portal.selectors import user_email_verified
from tests.factories import PASSWORD, OrganizationFactory, UserFactory

pytestmark = pytest.mark.django_db
User = get_user_model()
STRONG = "violet-harbour-1987"


def _signup(client, email="ada@voice.test", org_name="Voice Co"):
    return client.post("/portal/signup/", {"org_name": org_name, "email": email,
                                           "password": STRONG})


def _link_in(message) -> str:
    return re.search(r"https?://\S+", message.body).group(0)


def test_signup_creates_user_applied_org_and_owner_then_shows_status(redis_client):
    client = Client()
    response = _signup(client)
    org = Organization.objects.get(name="Voice Co")
    assert response.status_code == 302 and response["Location"] == f"/portal/o/{org.slug}/"
    assert org.status == OrgStatus.APPLIED
    assert Membership.objects.get(org=org).role == Role.OWNER
    page = client.get(response["Location"]).content.decode()
    assert 'data-status="applied"' in page and "confirm your email" in page


def test_signup_with_taken_email_writes_nothing(redis_client):
    UserFactory(username="ada@voice.test")
    response = _signup(Client())
    assert response.status_code == 200
    assert "exists already" in response.content.decode()
    assert not Organization.objects.filter(name="Voice Co").exists()


def test_signup_rejects_a_weak_password(redis_client):
    response = Client().post("/portal/signup/", {"org_name": "X", "email": "x@x.test",
                                                  "password": "12345678"})
    page = response.content.decode()
    assert "This password is too common." in page
    # Help text and errors are tied to the field for screen readers.
    assert 'aria-describedby="id_password_helptext id_password_error"' in page
    assert 'id="id_password_helptext"' in page and 'aria-invalid="true"' in page
    assert not User.objects.filter(username="x@x.test").exists()


def test_email_verification_link_verifies_the_address(redis_client,
                                                      django_capture_on_commit_callbacks):
    client = Client()
    with django_capture_on_commit_callbacks(execute=True):
        _signup(client)
    user = User.objects.get(username="ada@voice.test")
    assert not user_email_verified(user=user)
    (message,) = mail.outbox
    response = client.get(_link_in(message))
    assert response.status_code == 200 and user_email_verified(user=user)
    assert Client().get("/portal/verify-email/MQ/forged-token/").status_code == 400


def test_login_locks_after_five_failures_per_username_and_ip(redis_client):
    user = UserFactory()
    client = Client()
    for _ in range(5):
        client.post("/portal/login/", {"username": user.username, "password": "wrong"})
    response = client.post("/portal/login/", {"username": user.username, "password": PASSWORD})
    assert "Too many failed sign-in attempts. Try again in 15 minutes." in \
        response.content.decode()
    other_ip = Client(REMOTE_ADDR="10.0.0.9").post(
        "/portal/login/", {"username": user.username, "password": PASSWORD})
    assert other_ip.status_code == 302


def test_successful_login_clears_the_failure_count(redis_client):
    user = UserFactory()
    client = Client()
    for _ in range(4):
        client.post("/portal/login/", {"username": user.username, "password": "wrong"})
    assert client.post("/portal/login/", {"username": user.username,
                                          "password": PASSWORD}).status_code == 302
    client.post("/portal/logout/")
    for _ in range(4):
        client.post("/portal/login/", {"username": user.username, "password": "wrong"})
    assert client.post("/portal/login/", {"username": user.username,
                                          "password": PASSWORD}).status_code == 302


def test_password_reset_by_email(redis_client, django_capture_on_commit_callbacks):
    user = UserFactory()
    client = Client()
    with django_capture_on_commit_callbacks(execute=True):  # the email leaves after the commit
        client.post("/portal/password-reset/", {"email": user.email})
    (message,) = mail.outbox
    response = client.get(_link_in(message), follow=True)
    response = client.post(response.redirect_chain[-1][0], {
        "new_password1": STRONG, "new_password2": STRONG})
    assert response.status_code == 302
    assert Client().post("/portal/login/", {"username": user.username,
                                            "password": STRONG}).status_code == 302


def test_invitation_accepted_by_link(redis_client, django_capture_on_commit_callbacks):
    org = OrganizationFactory()
    owner = UserFactory()
    invitee = UserFactory(username="grace@voice.test")
    with django_capture_on_commit_callbacks(execute=True):
        invitation_create(org=org, email=invitee.email, role=Role.DEVELOPER, actor=owner)
    link = _link_in(mail.outbox[0])
    path = link.split("://", 1)[1].split("/", 1)[1]
    client = Client()
    assert "I have an account: sign in" in client.get("/" + path).content.decode()
    client.force_login(invitee)
    assert "Accept the invitation" in client.get("/" + path).content.decode()
    response = client.post("/" + path)
    assert response["Location"] == f"/portal/o/{org.slug}/"
    assert Membership.objects.get(org=org, user=invitee).role == Role.DEVELOPER
    assert client.post("/" + path).status_code == 404  # used links stop working


def test_forged_invitation_link_is_a_404(redis_client):
    client = Client()
    client.force_login(UserFactory())
    response = client.post("/portal/invitations/inv_000000000000_forged/")
    assert response.status_code == 404
    assert "This invitation link is not valid." in response.content.decode()


def test_user_without_org_can_apply_with_a_new_one(redis_client):
    client = Client()
    client.force_login(UserFactory())
    assert "You are not in an organization yet" in client.get("/portal/").content.decode()
    response = client.post("/portal/orgs/new/", {"name": "Agents Ltd"})
    org = Organization.objects.get(name="Agents Ltd")
    assert response["Location"] == f"/portal/o/{org.slug}/"


def test_invitee_without_account_creates_one_and_joins(redis_client,
                                                        django_capture_on_commit_callbacks):
    org = OrganizationFactory()
    with django_capture_on_commit_callbacks(execute=True):
        _, token = invitation_create(org=org, email="new@voice.test", role=Role.VIEWER,
                                     actor=UserFactory())
    client = Client()
    response = client.post(f"/portal/invitations/{token}/", {"email": "new@voice.test",
                                                             "password": STRONG})
    assert response["Location"] == f"/portal/o/{org.slug}/"
    user = User.objects.get(username="new@voice.test")
    assert Membership.objects.get(org=org, user=user).role == Role.VIEWER
    assert not Organization.objects.exclude(pk=org.pk).exists()  # joining applies for nothing


def test_signup_through_a_dead_invitation_link_creates_no_account(redis_client):
    response = Client().post("/portal/invitations/inv_000000000000_forged/",
                             {"email": "new@voice.test", "password": STRONG})
    assert response.status_code == 404
    assert not User.objects.filter(username="new@voice.test").exists()


def test_spraying_one_password_over_many_accounts_locks_the_address(redis_client):
    from sluice.login_throttle import IP_MAX_FAILURES

    victim = UserFactory()
    client = Client()
    for n in range(IP_MAX_FAILURES):
        client.post("/portal/login/", {"username": f"guess{n}@voice.test",
                                       "password": "Spring2026"})
    response = client.post("/portal/login/", {"username": victim.username, "password": PASSWORD})
    assert response.status_code == 200
    assert "Too many failed sign-in attempts" in response.content.decode()
    elsewhere = Client(REMOTE_ADDR="10.1.2.3")
    assert elsewhere.post("/portal/login/", {"username": victim.username,
                                             "password": PASSWORD}).status_code == 302


def test_password_reset_email_leaves_after_the_response(redis_client,
                                                        django_capture_on_commit_callbacks):
    """The request only queues the email: it is built and sent by a task
    after the commit, so the response takes as long for a known address as for an unknown one
    and no reset token is stored on the way."""
    from sluice.models import OutboundEmail

    user = UserFactory()
    client = Client()
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client.post("/portal/password-reset/", {"email": user.email})
        assert response.status_code == 302
        assert mail.outbox == []  # nothing sent inside the request
    (queued,) = OutboundEmail.objects.all()
    assert str(user.pk) in str(queued.params) and "token" not in str(queued.params)
    for callback in callbacks:
        callback()
    (message,) = mail.outbox
    assert message.to == [user.email]
    assert "/portal/password-reset/" in _link_in(message)
    with django_capture_on_commit_callbacks(execute=False):
        unknown = client.post("/portal/password-reset/", {"email": "nobody@voice.test"})
    assert unknown.status_code == 302 and OutboundEmail.objects.count() == 1
