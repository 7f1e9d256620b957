"""Rate limits on what strangers and orgs can make Sluice email: sign-ups and password resets
per client address, reset emails per address asked about, invitations per organization. Both
edges of each limit, through the real views and middleware, against real Redis and
PostgreSQL."""

import threading
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.db import connection
from django.test import Client

from orgs.models import Invitation
from orgs.services import invitation_create
from sluice import rate_limits
from sluice.errors import RateLimited
from sluice.models import OutboundEmail
from sluice.rate_limits import Rate, rate_limit_spend
from tests.factories import UserFactory
from tests.test_deploy_settings import production_env, run

pytestmark = pytest.mark.django_db
User = get_user_model()
STRONG = "violet-harbour-1987"


def _signup(client, n: int):
    return client.post("/portal/signup/", {"org_name": f"Org {n}", "email": f"u{n}@x.test",
                                           "password": STRONG})


def test_sign_ups_per_client_address(settings, redis_client):
    settings.SIGNUP_RATE = Rate(count=3, seconds=3600)
    for n in range(3):
        assert _signup(Client(REMOTE_ADDR="198.51.100.7"), n).status_code == 302
    refused = _signup(Client(REMOTE_ADDR="198.51.100.7"), 3)
    assert refused.status_code == 429
    assert "Too many sign-ups from your network. Try again in 60 minutes." in \
        refused.content.decode()
    assert not User.objects.filter(username="u3@x.test").exists()
    assert _signup(Client(REMOTE_ADDR="198.51.100.8"), 4).status_code == 302


def test_joining_through_an_invitation_is_a_sign_up_too(settings, redis_client, two_orgs):
    a, _ = two_orgs
    settings.SIGNUP_RATE = Rate(count=1, seconds=3600)
    _signup(Client(REMOTE_ADDR="198.51.100.7"), 0)
    _invitation, token = invitation_create(org=a.org, email="new@x.test", role="viewer",
                                           actor=a.owner)
    refused = Client(REMOTE_ADDR="198.51.100.7").post(
        f"/portal/invitations/{token}/", {"email": "new@x.test", "password": STRONG})
    assert refused.status_code == 429
    assert not User.objects.filter(username="new@x.test").exists()


def _reset(client, email: str):
    return client.post("/portal/password-reset/", {"email": email})


def test_password_reset_requests_per_client_address(settings, redis_client):
    settings.PASSWORD_RESET_RATE = Rate(count=2, seconds=3600)
    for n in range(2):
        assert _reset(Client(REMOTE_ADDR="198.51.100.7"), f"n{n}@x.test").status_code == 302
    refused = _reset(Client(REMOTE_ADDR="198.51.100.7"), "n2@x.test")
    assert refused.status_code == 429
    assert "Too many password reset requests" in refused.content.decode()
    assert _reset(Client(REMOTE_ADDR="198.51.100.8"), "n3@x.test").status_code == 302


def test_reset_emails_per_address_asked_about_with_the_same_answer(
        redis_client, django_capture_on_commit_callbacks):
    victim = UserFactory()
    answers = []
    with django_capture_on_commit_callbacks(execute=True):
        for n in range(5):  # from five different addresses: the victim's inbox is the limit
            answers.append(_reset(Client(REMOTE_ADDR=f"198.51.100.{n}"), victim.email))
    assert [r.status_code for r in answers] == [302] * 5
    assert len({r["Location"] for r in answers}) == 1
    assert len(mail.outbox) == 3
    assert OutboundEmail.objects.filter(kind="portal.password_reset").count() == 3


def test_invitations_per_org_over_the_api_and_in_the_portal(settings, two_orgs, redis_client):
    a, b = two_orgs
    settings.INVITATION_RATE = Rate(count=3, seconds=86400)
    url = f"/api/v1/orgs/{a.org.pk}/invitations/"
    for n in range(3):
        assert a.client.post(url, {"email": f"i{n}@x.test", "role": "viewer"},
                             format="json").status_code == 201
    refused = a.client.post(url, {"email": "i3@x.test", "role": "viewer"}, format="json")
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "rate_limited"
    assert 86000 < int(refused["Retry-After"]) <= 86401
    assert refused.json()["error"]["details"]["retry_after_seconds"] == int(refused["Retry-After"])
    members = a.client.post(f"/api/v1/orgs/{a.org.pk}/members/",
                            {"email": "i3@x.test", "role": "viewer"}, format="json")
    assert members.status_code == 429

    from tests.portal.conftest import portal_client
    page = portal_client(a.owner).post(f"/portal/o/{a.org.slug}/members/invite/",
                                       {"email": "i3@x.test", "role": "viewer"}, follow=True)
    assert "the limit is 3/day" in page.content.decode()
    assert Invitation.objects.filter(org=a.org).count() == 3
    # Another org has its own count; and the window slides.
    assert b.client.post(f"/api/v1/orgs/{b.org.pk}/invitations/",
                         {"email": "i@x.test", "role": "viewer"}, format="json"
                         ).status_code == 201
    oldest = Invitation.objects.filter(org=a.org).order_by("created_at").first()
    Invitation.objects.filter(pk=oldest.pk).update(
        created_at=oldest.created_at - timedelta(days=1))
    assert a.client.post(url, {"email": "i3@x.test", "role": "viewer"},
                         format="json").status_code == 201


@pytest.mark.django_db(transaction=True)
def test_racing_invitations_do_not_pass_the_rate(settings, two_orgs):
    a, _ = two_orgs
    settings.INVITATION_RATE = Rate(count=5, seconds=86400)
    barrier, outcomes = threading.Barrier(8), []

    def invite(n: int) -> None:
        barrier.wait()
        try:
            invitation_create(org=a.org, email=f"r{n}@x.test", role="viewer", actor=a.owner)
            outcomes.append("created")
        except RateLimited:
            outcomes.append("limited")
        finally:
            connection.close()

    threads = [threading.Thread(target=invite, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["created"] * 5 + ["limited"] * 3
    assert Invitation.objects.filter(org=a.org).count() == 5


def test_a_redis_outage_lets_the_forms_work(settings, monkeypatch):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    monkeypatch.setattr(rate_limits, "_client", None)
    for _ in range(3):
        assert rate_limit_spend(scope="t", identity="x", rate=Rate(count=1, seconds=60)) == 0
    rate_limits._client = None


def test_rates_are_parsed_strictly():
    env = production_env(SLUICE_SIGNUP_RATE="5/minute", SLUICE_INVITATION_RATE="200/day")
    shown = run(["-c", "import django; django.setup(); from django.conf import settings as s; "
                       "print(s.SIGNUP_RATE, s.PASSWORD_RESET_RATE, s.INVITATION_RATE, "
                       "s.SIGNUP_RATE.seconds)"], env)
    assert shown.stdout.split() == ["5/minute", "10/hour", "200/day", "60"], shown.stderr
    for bad in ("10/fortnight", "0/hour", "ten/hour", "10"):
        result = run(["-c", "import django; django.setup()"],
                     production_env(SLUICE_PASSWORD_RESET_RATE=bad))
        assert result.returncode != 0 and "SLUICE_PASSWORD_RESET_RATE" in result.stderr, bad
