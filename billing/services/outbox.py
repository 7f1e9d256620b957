"""The transactional outbox: Stripe calls owed, delivered at least once, acted on at most once.

- `outbox_enqueue` runs inside the caller's transaction: the row exists iff the change does.
  A kick to deliver it is queued for after the commit; the beat drain catches anything missed.
- A worker claims a due row with a conditional UPDATE that also pushes `next_attempt_at` out
  by a lease, so two workers never run one message at the same time.
- Retryable failures back off exponentially; after MAX_ATTEMPTS, or on an error retrying
  cannot fix, the row becomes a dead letter that an operator can retry.
- Every Stripe request carries an idempotency key derived from our ids (see stripe_sync), so a
  request whose response was lost is answered from Stripe's record when retried.
"""

import logging
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from billing.models import Invoice, OutboxMessage, OutboxStatus
from billing.stripe_api import StripeRejected, StripeUnavailable
from orgs.models import Organization
from orgs.services.audit import Actor, audit_record
from sluice.errors import IllegalTransition
from sluice.transactions import nested_atomic

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 8
LEASE = timedelta(minutes=2)
BACKOFF_BASE_SECONDS = 30
BACKOFF_MAX_SECONDS = 6 * 3600


def backoff_after(attempts: int) -> timedelta:
    return timedelta(seconds=min(BACKOFF_BASE_SECONDS * 2 ** (attempts - 1),
                                 BACKOFF_MAX_SECONDS))


def _kick_later(message_id: int) -> None:
    from billing.tasks import outbox_deliver_task

    transaction.on_commit(lambda: outbox_deliver_task.delay(message_id))


@nested_atomic
def outbox_enqueue(*, kind: str, org: Organization, invoice: Invoice | None = None
                   ) -> OutboxMessage:
    """Idempotent: one message per (kind, org, invoice); enqueuing again returns it."""
    try:
        with transaction.atomic():
            message = OutboxMessage.objects.create(kind=kind, org=org, invoice=invoice)
    except IntegrityError:
        return OutboxMessage.objects.get(kind=kind, org=org, invoice=invoice)
    _kick_later(message.pk)
    return message


def _claim(message_id: int, now: datetime) -> bool:
    claimed = OutboxMessage.objects.filter(
        pk=message_id, status=OutboxStatus.PENDING, next_attempt_at__lte=now,
    ).update(attempts=F("attempts") + 1, next_attempt_at=now + LEASE)
    return claimed == 1


def _finish(message: OutboxMessage, *, status: str, error: str = "",
            next_attempt_at: datetime | None = None) -> None:
    fields = {"status": status, "last_error": error}
    if status == OutboxStatus.DONE:
        fields["done_at"] = timezone.now()
    if next_attempt_at:
        fields["next_attempt_at"] = next_attempt_at
    OutboxMessage.objects.filter(pk=message.pk).update(**fields)


def outbox_deliver(*, message_id: int, now: datetime | None = None) -> str:
    """Run one message if it is due. Returns its status afterwards ('skipped' if not claimed).
    Never inside a transaction: Stripe calls must not hold database locks."""
    from billing.services.stripe_sync import stripe_message_run

    now = now or timezone.now()
    if not _claim(message_id, now):
        return "skipped"
    message = OutboxMessage.objects.select_related("org", "invoice").get(pk=message_id)
    try:
        stripe_message_run(message=message)
    except StripeUnavailable as exc:
        if message.attempts >= MAX_ATTEMPTS:
            _finish(message, status=OutboxStatus.DEAD, error=f"gave up: {exc.message}")
            return OutboxStatus.DEAD
        _finish(message, status=OutboxStatus.PENDING, error=exc.message,
                next_attempt_at=now + backoff_after(message.attempts))
        return OutboxStatus.PENDING
    except StripeRejected as exc:
        logger.warning("outbox message %s rejected by Stripe: %s", message.pk, exc.message)
        _finish(message, status=OutboxStatus.DEAD, error=exc.message)
        return OutboxStatus.DEAD
    _finish(message, status=OutboxStatus.DONE)
    return OutboxStatus.DONE


def outbox_drain(*, now: datetime | None = None, limit: int = 200) -> dict[str, int]:
    """Deliver every due message, oldest first (beat, every minute)."""
    now = now or timezone.now()
    due = list(OutboxMessage.objects.filter(status=OutboxStatus.PENDING,
                                            next_attempt_at__lte=now)
               .order_by("next_attempt_at", "id").values_list("pk", flat=True)[:limit])
    counts: dict[str, int] = {}
    for message_id in due:
        result = outbox_deliver(message_id=message_id, now=now)
        counts[result] = counts.get(result, 0) + 1
    return counts


@transaction.atomic(durable=True)
def outbox_retry(*, message: OutboxMessage, actor: Actor) -> OutboxMessage:
    """Operator action on a dead letter: back to pending, due now, attempts reset."""
    locked = OutboxMessage.objects.select_for_update().get(pk=message.pk)
    if locked.status != OutboxStatus.DEAD:
        raise IllegalTransition("Only a dead letter can be retried.",
                                details={"status": locked.status})
    locked.status, locked.attempts, locked.next_attempt_at = (
        OutboxStatus.PENDING, 0, timezone.now())
    locked.save(update_fields=["status", "attempts", "next_attempt_at"])
    audit_record(actor=actor, action="billing.outbox_retry", target=locked, org=locked.org,
                 before={"status": OutboxStatus.DEAD, "last_error": locked.last_error},
                 after={"status": OutboxStatus.PENDING})
    _kick_later(locked.pk)
    return locked
