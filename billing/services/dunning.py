"""Dunning: a failed payment opens a grace period; at its end the org is suspended for
non-payment; paying what is owed restores it."""

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from billing.events import invoice_paid as invoice_paid_event
from billing.events import invoice_payment_failed as invoice_payment_failed_event
from billing.models import BillingAccount, Invoice, InvoiceStatus
from billing.notify import payment_failed_email_queue, suspended_for_payment_email_queue
from billing.services.accounts import billing_account_lock
from orgs.models import Organization, OrgStatus, SuspensionReason
from orgs.services import org_restore, org_suspend
from orgs.services.audit import Actor, audit_record
from quotas.ledger import bookings_relying_on
from sluice.errors import IllegalTransition
from sluice.transactions import nestable

STRIPE_ACTOR = "stripe"


def _invoice_locked(invoice: Invoice) -> Invoice:
    """The org, then its invoice (the house lock order, quotas/services.py): paying may restore
    the org, and a suspension locks the org before its billing rows."""
    Organization.objects.select_for_update().get(pk=invoice.org_id)
    return Invoice.objects.select_for_update(of=("self",)).select_related("org").get(
        pk=invoice.pk)


@nestable
@transaction.atomic(durable=True)
def invoice_payment_failed(*, invoice: Invoice, actor: Actor = STRIPE_ACTOR,
                           now: datetime | None = None) -> BillingAccount:
    """Start the grace period (unless one is running: retries of a failing charge do not
    extend it) and tell the billing members."""
    now = now or timezone.now()
    invoice = _invoice_locked(invoice)
    account = billing_account_lock(org=invoice.org)
    if invoice.status != InvoiceStatus.OPEN:
        return account
    if invoice.payment_failed_at is None:
        invoice.payment_failed_at = now
        invoice.save(update_fields=["payment_failed_at"])
        invoice_payment_failed_event.emit(invoice=invoice)
    if account.grace_until is None:
        account.payment_failed_at = now
        account.grace_until = now + timedelta(days=settings.DUNNING_GRACE_DAYS)
        account.save(update_fields=["payment_failed_at", "grace_until", "updated_at"])
        audit_record(actor=actor, action="billing.dunning_start", target=invoice,
                     org=invoice.org, after={"grace_until": account.grace_until.isoformat()})
        payment_failed_email_queue(invoice=invoice)
    return account


def _org_owes(org_id: int) -> bool:
    return Invoice.objects.filter(org_id=org_id, status=InvoiceStatus.OPEN,
                                  payment_failed_at__isnull=False).exists()


@nestable
@transaction.atomic(durable=True)
def invoice_paid(*, invoice: Invoice, actor: Actor = STRIPE_ACTOR,
                 now: datetime | None = None) -> Invoice:
    """Mark paid; when nothing failed is left unpaid, end dunning and lift a payment
    suspension."""
    invoice = _invoice_locked(invoice)
    if invoice.status == InvoiceStatus.PAID:
        return invoice
    if invoice.status != InvoiceStatus.OPEN:
        raise IllegalTransition(f"A {invoice.status} invoice cannot be paid.",
                                details={"status": invoice.status})
    invoice.status, invoice.paid_at = InvoiceStatus.PAID, now or timezone.now()
    invoice.save(update_fields=["status", "paid_at"])
    invoice_paid_event.emit(invoice=invoice)
    audit_record(actor=actor, action="invoice.paid", target=invoice, org=invoice.org,
                 before={"status": InvoiceStatus.OPEN}, after={"status": InvoiceStatus.PAID})
    account = billing_account_lock(org=invoice.org)
    if account.grace_until is not None and not _org_owes(invoice.org_id):
        account.grace_until = account.payment_failed_at = None
        account.save(update_fields=["grace_until", "payment_failed_at", "updated_at"])
        audit_record(actor=actor, action="billing.dunning_end", target=invoice,
                     org=invoice.org)
        org = invoice.org
        if org.status == OrgStatus.SUSPENDED and org.suspension_reason == SuspensionReason.PAYMENT:
            org_restore.nested(org=org, actor=actor, reason=f"invoice {invoice.number} paid")
    return invoice


@transaction.atomic(durable=True)
def dunning_suspend_one(*, account: BillingAccount, actor: Actor,
                        now: datetime) -> bool:
    Organization.objects.select_for_update().get(pk=account.org_id)
    account = BillingAccount.objects.select_for_update(of=("self",)).select_related("org").get(
        pk=account.pk)
    if account.grace_until is None or account.grace_until > now:
        return False  # paid meanwhile
    if account.org.status != OrgStatus.ACTIVE:
        return False
    # No operator to name them: the suspension for payment breaks every booking of the org
    # that has not ended (refunded in full, the org told, as for any booking a change breaks).
    broken = bookings_relying_on(org_id=account.org_id,
                                 ending_after=timezone.now()).values_list("pk", flat=True)
    org_suspend.nested(org=account.org, actor=actor, cause=SuspensionReason.PAYMENT,
                       reason=f"unpaid since {account.payment_failed_at:%Y-%m-%d}, grace ended",
                       break_bookings=list(broken))
    suspended_for_payment_email_queue(org=account.org)
    return True


def dunning_enforce(*, actor: Actor = "celery:dunning_enforce",
                    now: datetime | None = None) -> int:
    """Beat: suspend every active org whose grace period has ended unpaid."""
    now = now or timezone.now()
    due = BillingAccount.objects.filter(grace_until__lte=now, org__status=OrgStatus.ACTIVE)
    return sum(dunning_suspend_one(account=account, actor=actor, now=now) for account in due)
