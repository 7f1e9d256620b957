"""Every email Sluice sends goes through here: queued in the caller's transaction, built and
delivered after the commit by a Celery task, retried with backoff, at most once per key.

An app registers a builder per kind of email (`@email_kind("orgs.suspended")`, in a module its
AppConfig.ready() imports); the builder takes the queued params, reads committed state and
returns the messages. Building after the commit means the message describes what was committed
(a waitlist position, a shared reason), whatever order the transaction wrote things in.
Nothing is sent for a rolled-back change: the outbox row rolls back with it. If the broker is
down at commit time, beat's `emails_drain` delivers the row later.
"""

import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from email.utils import parseaddr
from functools import partial

from django.conf import settings
from django.core import mail as django_mail
from django.db import connection, transaction
from django.db.models import F
from django.template.loader import render_to_string
from django.utils import timezone

from sluice.models import EmailStatus, OutboundEmail

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 8
BACKOFF_BASE_SECONDS = 30


@dataclass(frozen=True)
class Email:
    """What a builder returns. `template` names `<template>.txt` (and `.html` when `html`).
    `one_per_recipient` sends each address its own message, so they do not see each other."""

    to: list[str]
    subject: str
    template: str
    context: dict
    html: bool = False
    one_per_recipient: bool = False


_builders: dict[str, Callable[..., Email | None]] = {}


def email_kind(name: str):
    """Register the builder of one kind of email. It returns None when there is nobody to
    tell (e.g. the org has no owner with an address)."""
    def register(builder: Callable[..., Email | None]):
        _builders[name] = builder
        return builder
    return register


def email_queue(*, kind: str, key: str, params: dict) -> bool:
    """Queue one email of `kind`, built from `params` (JSON) after the commit. `key` names the
    occurrence (e.g. "org:7:suspend:2026-11-30T08:00:00+00:00"): queueing the same key again
    is a no-op. Returns whether it was newly queued."""
    if kind not in _builders:
        raise LookupError(f"no email builder registered for {kind!r}")
    # Idempotency is the unique key: insert, and a conflict means "queued already".
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO sluice_outboundemail (key, kind, params, recipients,"
            " status, attempts, next_attempt_at, last_error, created_at)"
            " VALUES (%s, %s, %s, '', %s, 0, now(), '', now())"
            " ON CONFLICT (key) DO NOTHING RETURNING id",
            [key, kind, json.dumps(params), EmailStatus.PENDING])
        inserted = cursor.fetchone()
    if inserted is None:
        return False
    transaction.on_commit(partial(_deliver_later, inserted[0]))
    return True


def _deliver_later(email_id: int) -> None:
    from sluice.tasks import email_deliver  # the task module imports this one

    try:
        email_deliver.delay(email_id=email_id)
    except Exception:  # the broker is down: beat's drain delivers it
        logger.warning("could not queue delivery of email %s; the drain will", email_id)


def _message_id(key: str, to: str) -> str:
    # Derived from the key: should a message ever go out twice, mail clients see one message.
    domain = parseaddr(settings.DEFAULT_FROM_EMAIL)[1].rpartition("@")[2] or "sluice.invalid"
    digest = hashlib.sha256(f"{key}\n{to}".encode()).hexdigest()[:32]
    return f"<{digest}@{domain}>"


def _messages(row: OutboundEmail) -> list[django_mail.EmailMultiAlternatives]:
    email = _builders[row.kind](**row.params)
    if email is None:
        return []
    context = {**email.context, "public_url": settings.PUBLIC_URL}
    text = render_to_string(f"{email.template}.txt", context)
    html = render_to_string(f"{email.template}.html", context) if email.html else ""
    to = list(dict.fromkeys(email.to))
    messages = []
    for recipients in ([[address] for address in to] if email.one_per_recipient else [to]):
        message = django_mail.EmailMultiAlternatives(
            subject=email.subject, body=text, from_email=settings.DEFAULT_FROM_EMAIL,
            to=recipients, headers={"Message-ID": _message_id(row.key, recipients[0])})
        if html:
            message.attach_alternative(html, "text/html")
        messages.append(message)
    return messages


def email_deliver(*, email_id: int) -> bool:
    """Claim, build, send, mark. Returns whether this call sent it."""
    now = timezone.now()
    claimed = OutboundEmail.objects.filter(
        pk=email_id, status=EmailStatus.PENDING, next_attempt_at__lte=now,
    ).update(status=EmailStatus.SENDING, attempts=F("attempts") + 1)
    if not claimed:
        return False  # sent, being sent, or not due: someone else has it
    row = OutboundEmail.objects.get(pk=email_id)
    try:
        messages = _messages(row)
        if messages:
            with django_mail.get_connection() as connection:
                connection.send_messages(messages)
    except Exception as exc:
        # The mail server is unreachable or refused (smtplib errors are OSErrors), or building
        # failed: try again later with backoff, and give up after MAX_ATTEMPTS.
        failed = row.attempts >= MAX_ATTEMPTS
        OutboundEmail.objects.filter(pk=email_id).update(
            status=EmailStatus.FAILED if failed else EmailStatus.PENDING,
            next_attempt_at=now + timedelta(seconds=BACKOFF_BASE_SECONDS * 2 ** row.attempts),
            last_error=f"{type(exc).__name__}: {exc}"[:2000])
        logger.warning("email %s (%s) failed, attempt %d: %r", email_id, row.kind,
                       row.attempts, exc)
        return False
    OutboundEmail.objects.filter(pk=email_id).update(
        status=EmailStatus.SENT, sent_at=timezone.now(), params={}, last_error="",
        recipients=", ".join(address for m in messages for address in m.to))
    return True


def emails_drain(*, limit: int = 500) -> int:
    """Deliver due pending emails (beat): those whose task was lost or that wait for a retry."""
    due = list(OutboundEmail.objects.filter(status=EmailStatus.PENDING,
                                            next_attempt_at__lte=timezone.now())
               .order_by("next_attempt_at").values_list("pk", flat=True)[:limit])
    return sum(email_deliver(email_id=email_id) for email_id in due)
