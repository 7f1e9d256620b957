"""What each outbox message does in Stripe. Each step's idempotency key is derived from our ids
("sluice-invoice-42-line-7"), and each Stripe id is saved as soon as it is known, so a message
that fails halfway resumes where it stopped and a replayed request acts once."""

from billing import stripe_api
from billing.models import (
    BillingAccount,
    Invoice,
    InvoiceStatus,
    OutboxKind,
    OutboxMessage,
    OutboxStatus,
)
from billing.services.accounts import billing_account_for
from billing.services.outbox import outbox_enqueue
from orgs.models import Organization


def stripe_customer_enqueue(*, org_id: int) -> None:
    """Owe Stripe a customer for this org (on admission), in the caller's transaction."""
    outbox_enqueue(kind=OutboxKind.CUSTOMER_SYNC, org=Organization.objects.get(pk=org_id))


def stripe_customer_ensure(*, org: Organization) -> str:
    """The org's Stripe customer id, created on first need. The key is the org's id, so two
    workers racing here get the same customer."""
    account = billing_account_for(org=org)
    if account.stripe_customer_id:
        return account.stripe_customer_id
    customer_id = stripe_api.customer_create(name=org.name, org_id=org.pk,
                                             idempotency_key=f"sluice-customer-{org.pk}")
    BillingAccount.objects.filter(pk=org.pk, stripe_customer_id="").update(
        stripe_customer_id=customer_id)
    return customer_id


def _invoice_save_stripe(invoice: Invoice, *, stripe_invoice_id: str, status: str) -> None:
    Invoice.objects.filter(pk=invoice.pk).update(stripe_invoice_id=stripe_invoice_id,
                                                 stripe_status=status)
    invoice.stripe_invoice_id, invoice.stripe_status = stripe_invoice_id, status


def _invoice_push(invoice: Invoice) -> None:
    invoice.refresh_from_db()
    if invoice.status == InvoiceStatus.VOID or invoice.stripe_status == "open":
        return  # voided before it reached Stripe, or already finalized
    customer_id = stripe_customer_ensure(org=invoice.org)
    key = f"sluice-invoice-{invoice.pk}"
    if not invoice.stripe_invoice_id:
        created = stripe_api.invoice_create(
            customer_id=customer_id, invoice_id=invoice.pk, number=invoice.number,
            idempotency_key=key,
            supplements=invoice.supplements.number if invoice.supplements_id else "")
        _invoice_save_stripe(invoice, stripe_invoice_id=created.id, status=created.status)
    for line in invoice.lines.order_by("position"):
        stripe_api.invoice_item_add(
            customer_id=customer_id, stripe_invoice_id=invoice.stripe_invoice_id,
            amount_cents=line.amount_cents, description=line.description,
            idempotency_key=f"{key}-line-{line.pk}")
    finalized = stripe_api.invoice_finalize(stripe_invoice_id=invoice.stripe_invoice_id,
                                            idempotency_key=f"{key}-finalize")
    _invoice_save_stripe(invoice, stripe_invoice_id=finalized.id, status=finalized.status)


def _invoice_void(invoice: Invoice) -> None:
    push_pending = OutboxMessage.objects.filter(
        kind=OutboxKind.INVOICE_PUSH, invoice=invoice, status=OutboxStatus.PENDING).exists()
    if push_pending:
        # Void after the push has settled, or the push could recreate what we voided.
        raise stripe_api.StripeUnavailable("Waiting for the invoice push to finish.")
    invoice.refresh_from_db()
    if not invoice.stripe_invoice_id:
        return  # never reached Stripe
    voided = stripe_api.invoice_void(stripe_invoice_id=invoice.stripe_invoice_id,
                                     idempotency_key=f"sluice-invoice-{invoice.pk}-void")
    _invoice_save_stripe(invoice, stripe_invoice_id=voided.id, status=voided.status)


def stripe_message_run(*, message: OutboxMessage) -> None:
    if message.kind == OutboxKind.CUSTOMER_SYNC:
        stripe_customer_ensure(org=message.org)
    elif message.kind == OutboxKind.INVOICE_PUSH:
        _invoice_push(message.invoice)
    elif message.kind == OutboxKind.INVOICE_VOID:
        _invoice_void(message.invoice)
    else:
        raise stripe_api.StripeRejected(f"Unknown outbox message kind {message.kind!r}.")
