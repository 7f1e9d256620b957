"""Stripe webhooks: verified by the view, stored once by event id, processed after commit."""

import logging

from django.db import IntegrityError, transaction
from django.utils import timezone

from billing.models import BillingAccount, Invoice, StripeEvent, StripeEventStatus
from billing.services.dunning import invoice_paid, invoice_payment_failed
from orgs.services.audit import Actor, audit_record
from rollout.applications import application_check_set
from rollout.models import OPEN_APPLICATION_STATES, Application, CheckItem
from sluice.errors import DomainError, IllegalTransition, NotFound
from sluice.transactions import nestable

logger = logging.getLogger(__name__)


def _event_invoice(event: dict) -> Invoice:
    obj = (event.get("data") or {}).get("object") or {}
    invoice = Invoice.objects.filter(stripe_invoice_id=obj.get("id") or "-").first()
    our_id = (obj.get("metadata") or {}).get("sluice_invoice_id")
    if invoice is None and str(our_id or "").isdigit():
        invoice = Invoice.objects.filter(pk=int(our_id)).first()
    if invoice is None:
        raise NotFound(f"No invoice matches Stripe invoice {obj.get('id')!r}.")
    return invoice


def _on_invoice_paid(event: dict) -> None:
    invoice_paid.nested(invoice=_event_invoice(event))


def _on_invoice_payment_failed(event: dict) -> None:
    invoice_payment_failed.nested(invoice=_event_invoice(event))


def _on_checkout_completed(event: dict) -> None:
    """A setup-mode Checkout finished: the org has a payment method on file. If the org is
    still being vetted or queued, its application's checklist says so, ticked by "stripe"."""
    session = (event.get("data") or {}).get("object") or {}
    if session.get("mode") != "setup" or session.get("status", "complete") != "complete":
        return
    account = BillingAccount.objects.filter(
        stripe_customer_id=session.get("customer") or "-").first()
    if account is None:
        raise NotFound(f"No organization has Stripe customer {session.get('customer')!r}.")
    application = Application.objects.filter(org_id=account.org_id,
                                             state__in=OPEN_APPLICATION_STATES).first()
    if application is not None:
        application_check_set.nested(
            application=application, item=CheckItem.PAYMENT_METHOD_ON_FILE, done=True,
            actor="stripe", note=f"Checkout session {session.get('id')}")


HANDLERS = {
    "invoice.paid": _on_invoice_paid,
    "invoice.payment_failed": _on_invoice_payment_failed,
    "checkout.session.completed": _on_checkout_completed,
}


@transaction.atomic(durable=True)
def stripe_event_record(*, event: dict) -> tuple[StripeEvent, bool]:
    """Store a verified event. A replay (same id) is recognised by the unique constraint and
    changes nothing. Processing is queued for after the commit."""
    try:
        with transaction.atomic():
            stored = StripeEvent.objects.create(event_id=event["id"], type=event["type"],
                                                payload=event)
    except IntegrityError:
        return StripeEvent.objects.get(event_id=event["id"]), False
    from billing.tasks import stripe_event_process_task

    transaction.on_commit(lambda: stripe_event_process_task.delay(stored.pk))
    return stored, True


@nestable
@transaction.atomic(durable=True)
def stripe_event_process(*, stored_id: int) -> str:
    """Run the handler once. The row lock makes a concurrent run wait and then see it done; a
    handler error is recorded on the row (status failed) for an operator to retry."""
    stored = StripeEvent.objects.select_for_update().get(pk=stored_id)
    if stored.status in (StripeEventStatus.PROCESSED, StripeEventStatus.IGNORED):
        return stored.status
    handler = HANDLERS.get(stored.type)
    stored.status, stored.error = StripeEventStatus.IGNORED, ""
    if handler is not None:
        try:
            with transaction.atomic():
                handler(stored.payload)
            stored.status = StripeEventStatus.PROCESSED
        except DomainError as exc:
            logger.warning("Stripe event %s failed: %s", stored.event_id, exc.message)
            stored.status, stored.error = StripeEventStatus.FAILED, exc.message
    stored.processed_at = timezone.now()
    stored.save(update_fields=["status", "error", "processed_at"])
    return stored.status


@transaction.atomic(durable=True)
def stripe_event_retry(*, event: StripeEvent, actor: Actor) -> str:
    """Operator action on a failed event: record who asked, then run its handler again."""
    locked = StripeEvent.objects.select_for_update().get(pk=event.pk)
    if locked.status != StripeEventStatus.FAILED:
        raise IllegalTransition("Only a failed Stripe event can be processed again.",
                                details={"status": locked.status})
    before = {"status": locked.status, "error": locked.error}
    result = stripe_event_process.nested(stored_id=locked.pk)
    audit_record(actor=actor, action="billing.stripe_event_retry", target=locked,
                 before=before, after={"status": result})
    return result
