"""sluice.mail: queued in the transaction, built and sent after the commit, once per key."""

import smtplib
from datetime import timedelta

import pytest
from django.core import mail
from django.db import transaction
from django.utils import timezone

from sluice.mail import Email, email_deliver, email_kind, email_queue, emails_drain
from sluice.models import EmailStatus, OutboundEmail

built: list[dict] = []


@email_kind("tests.hello")
def _hello(*, name: str, to: list[str]) -> Email:
    built.append({"name": name})
    return Email(to=to, subject=f"Hello {name}", template="tests/hello",
                 context={"name": name})


@email_kind("tests.nobody")
def _nobody(**params) -> None:
    return None


@pytest.fixture(autouse=True)
def _templates(settings, tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "hello.txt").write_text("Hello {{ name }} from {{ public_url }}")
    settings.TEMPLATES = [{**settings.TEMPLATES[0], "DIRS": [tmp_path]}]
    built.clear()


def test_sent_after_the_commit_once_per_key(db, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        assert email_queue(kind="tests.hello", key="k1", params={"name": "Ada", "to": ["a@x.io"]})
        assert not email_queue(kind="tests.hello", key="k1",
                               params={"name": "Ada", "to": ["a@x.io"]})
        assert mail.outbox == []  # nothing inside the transaction
    assert [(m.subject, m.to) for m in mail.outbox] == [("Hello Ada", ["a@x.io"])]
    assert mail.outbox[0].body.startswith("Hello Ada from http")
    row = OutboundEmail.objects.get(key="k1")
    assert (row.status, row.params, row.recipients) == (EmailStatus.SENT, {}, "a@x.io")
    assert mail.outbox[0].extra_headers["Message-ID"].startswith("<")


def test_several_recipients_share_one_message_unless_asked_otherwise(
        db, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        email_queue(kind="tests.hello", key="k2", params={"name": "B", "to": ["a@x.io",
                                                                             "b@x.io"]})
    assert [m.to for m in mail.outbox] == [["a@x.io", "b@x.io"]]


def test_a_rolled_back_change_sends_nothing(transactional_db):
    with pytest.raises(RuntimeError), transaction.atomic():
        email_queue(kind="tests.hello", key="k3", params={"name": "C", "to": ["c@x.io"]})
        raise RuntimeError
    assert not OutboundEmail.objects.exists()
    assert mail.outbox == []


def test_a_claimed_email_is_never_sent_again(db):
    """A worker that died after handing the message to the server left the row `sending`:
    a redelivered task (acks_late) finds it claimed and does not send twice."""
    email_queue(kind="tests.hello", key="k4", params={"name": "D", "to": ["d@x.io"]})
    row = OutboundEmail.objects.get(key="k4")
    OutboundEmail.objects.filter(pk=row.pk).update(status=EmailStatus.SENDING)
    assert email_deliver(email_id=row.pk) is False
    assert emails_drain() == 0
    assert mail.outbox == []


def test_a_failing_mail_server_is_retried_with_backoff(db, settings, monkeypatch):
    email_queue(kind="tests.hello", key="k5", params={"name": "E", "to": ["e@x.io"]})
    row = OutboundEmail.objects.get(key="k5")

    def refuse(self, messages):
        raise smtplib.SMTPServerDisconnected("gone")

    monkeypatch.setattr("django.core.mail.backends.locmem.EmailBackend.send_messages", refuse)
    assert email_deliver(email_id=row.pk) is False
    row.refresh_from_db()
    assert (row.status, row.attempts) == (EmailStatus.PENDING, 1)
    assert "SMTPServerDisconnected" in row.last_error
    assert row.next_attempt_at > timezone.now()
    assert emails_drain() == 0  # not due yet

    monkeypatch.undo()
    OutboundEmail.objects.filter(pk=row.pk).update(
        next_attempt_at=timezone.now() - timedelta(seconds=1))
    assert emails_drain() == 1
    assert [m.subject for m in mail.outbox] == ["Hello E"]


def test_the_drain_delivers_what_the_broker_lost(db):
    """Queued inside a test transaction that never commits here: the on-commit task never ran,
    as when the broker was down at commit time. Beat's drain sends it."""
    email_queue(kind="tests.hello", key="k6", params={"name": "F", "to": ["f@x.io"]})
    assert mail.outbox == []
    assert emails_drain() == 1
    assert emails_drain() == 0
    assert [m.to for m in mail.outbox] == [["f@x.io"]]


def test_nobody_to_tell_is_marked_sent_without_a_message(db):
    email_queue(kind="tests.nobody", key="k7", params={})
    assert emails_drain() == 1
    assert mail.outbox == []
    assert OutboundEmail.objects.get(key="k7").status == EmailStatus.SENT


def test_an_unknown_kind_is_refused_at_queue_time(db):
    with pytest.raises(LookupError):
        email_queue(kind="tests.unknown", key="k8", params={})
