"""Invitation tokens are stored nowhere: the invitation keeps a digest, the email outbox the
invitation's id; the email's builder makes the token again from the secret key."""

import json

import pytest
from django.core import mail
from django.db import connection
from django.test import override_settings

from orgs.models import Invitation, Membership
from orgs.services import invitation_accept, invitation_create
from sluice.mail import email_deliver
from sluice.models import EmailStatus, OutboundEmail
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

OLD_KEY = "an-older-secret-key-that-signed-the-invitation-" + "y" * 20
NEW_KEY = "the-current-secret-key-after-a-rotation-of-keys-" + "z" * 20


def _emailed_token(message) -> str:
    link = next(w for w in message.body.split() if "/invitations/" in w)
    return link.rstrip("/").split("/")[-1]


def _everything_stored() -> str:
    """Every row of the tables that could hold the token, as text."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT row_to_json(e)::text FROM sluice_outboundemail e "
                       "UNION ALL SELECT row_to_json(i)::text FROM orgs_invitation i "
                       "UNION ALL SELECT row_to_json(a)::text FROM orgs_auditevent a")
        return "\n".join(row[0] for row in cursor.fetchall())


def test_the_token_is_in_no_row_before_or_after_the_email(two_orgs,
                                                          django_capture_on_commit_callbacks):
    a, _ = two_orgs
    with django_capture_on_commit_callbacks(execute=False):
        _invitation, token = invitation_create(org=a.org, email="new@x.test", role="developer",
                                               actor=a.owner)
    row = OutboundEmail.objects.get(kind="orgs.invitation")
    assert row.params == {"invitation_id": _invitation.pk}
    secret_part = token.rsplit("_", 1)[1]
    assert secret_part not in _everything_stored()

    email_deliver(email_id=row.pk)
    assert _emailed_token(mail.outbox[0]) == token
    assert secret_part not in _everything_stored()
    newcomer = UserFactory(email="new@x.test")
    assert invitation_accept(token=token, user=newcomer).org == a.org


def test_an_email_built_after_a_key_rotation_uses_the_fallback_key(two_orgs,
                                                                   django_capture_on_commit_callbacks):
    a, _ = two_orgs
    with override_settings(SECRET_KEY=OLD_KEY), \
            django_capture_on_commit_callbacks(execute=False):
        _invitation, token = invitation_create(org=a.org, email="new@x.test", role="viewer",
                                               actor=a.owner)
    row = OutboundEmail.objects.get(kind="orgs.invitation")
    with override_settings(SECRET_KEY=NEW_KEY, SECRET_KEY_FALLBACKS=[OLD_KEY]):
        assert email_deliver(email_id=row.pk)
    assert _emailed_token(mail.outbox[0]) == token


def test_without_the_key_that_made_it_the_email_fails_and_says_why(two_orgs,
                                                                    django_capture_on_commit_callbacks):
    a, _ = two_orgs
    with override_settings(SECRET_KEY=OLD_KEY), \
            django_capture_on_commit_callbacks(execute=False):
        invitation_create(org=a.org, email="new@x.test", role="viewer", actor=a.owner)
    row = OutboundEmail.objects.get(kind="orgs.invitation")
    with override_settings(SECRET_KEY=NEW_KEY, SECRET_KEY_FALLBACKS=[]):
        assert not email_deliver(email_id=row.pk)
    row.refresh_from_db()
    assert row.status == EmailStatus.PENDING and not mail.outbox
    assert "no longer configured" in row.last_error
    assert "token" not in json.dumps(row.params)


def test_the_invitation_row_keeps_only_a_digest(two_orgs, django_capture_on_commit_callbacks):
    a, _ = two_orgs
    with django_capture_on_commit_callbacks(execute=True):
        invitation, token = invitation_create(org=a.org, email="new@x.test", role="viewer",
                                              actor=a.owner)
    stored = Invitation.objects.filter(pk=invitation.pk).values().get()
    assert token not in json.dumps(stored, default=str)
    assert not Membership.objects.filter(user__email="new@x.test").exists()


def test_the_migration_drops_tokens_from_rows_that_will_never_be_sent():
    from importlib import import_module

    from django.apps import apps
    from django.utils import timezone

    def row(key, status):
        return OutboundEmail.objects.create(
            key=key, kind="orgs.invitation", status=status, next_attempt_at=timezone.now(),
            params={"invitation_id": 1, "token": "inv_0123456789ab_secret"})

    failed, stuck, pending = (row("f", EmailStatus.FAILED), row("s", EmailStatus.SENDING),
                              row("p", EmailStatus.PENDING))
    import_module("orgs.migrations.0007_invitation_tokens_out_of_the_outbox").tokens_drop(
        apps, None)
    for email in (failed, stuck):
        email.refresh_from_db()
        assert email.params == {"invitation_id": 1}
    pending.refresh_from_db()
    assert "token" in pending.params  # sent soon, and cleared then
