"""Emails to an org's billing members (owners and billing role), one message each, built by
sluice.mail after the change that calls for them commits."""

from billing.bookings import BOOKING_READERS
from billing.models import BillingAccount, BookingCharge, Invoice
from billing.money import format_micros
from orgs.models import BILLING_READERS, Membership, Organization
from quotas.models import Booking
from sluice.mail import Email, email_kind, email_queue


def billing_recipients(*, org_id: int) -> list[str]:
    return sorted(set(
        Membership.objects.filter(org_id=org_id, role__in=BILLING_READERS)
        .exclude(user__email="").values_list("user__email", flat=True)))


def _billing_email(*, org_id: int, subject: str, template: str, **context) -> Email | None:
    recipients = billing_recipients(org_id=org_id)
    if not recipients:
        return None
    org = Organization.objects.get(pk=org_id)
    return Email(to=recipients, subject=subject.format(org=org.name),
                 template=f"billing/email/{template}", context={"org": org, **context},
                 one_per_recipient=True)


@email_kind("billing.payment_failed")
def _payment_failed(*, org_id: int, invoice_id: int) -> Email | None:
    account = BillingAccount.objects.get(org_id=org_id)
    if account.grace_until is None:
        return None  # paid meanwhile: nothing to ask for
    return _billing_email(org_id=org_id, subject="Payment failed for {org}: action needed",
                          template="payment_failed",
                          invoice=Invoice.objects.get(pk=invoice_id),
                          grace_until=account.grace_until)


@email_kind("billing.suspended_for_payment")
def _suspended_for_payment(*, org_id: int) -> Email | None:
    return _billing_email(org_id=org_id, subject="{org} is suspended for non-payment",
                          template="suspended_for_payment")


@email_kind("billing.spend_alert")
def _spend_alert(*, org_id: int, threshold: int, cost_micros: int,
                 cap_micros: int) -> Email | None:
    return _billing_email(
        org_id=org_id, subject=f"{{org}} has used {threshold}% of its monthly spend cap",
        template="spend_alert", threshold=threshold, cost=format_micros(cost_micros),
        cap=format_micros(cap_micros))


@email_kind("billing.booking_cancelled")
def _booking_cancelled(*, org_id: int, booking_id: int) -> Email | None:
    booking = Booking.objects.select_related("pool").get(pk=booking_id)
    charge = BookingCharge.objects.filter(booking_id=booking_id).first()
    recipients = sorted(set(
        Membership.objects.filter(org_id=org_id, role__in=BOOKING_READERS)
        .exclude(user__email="").values_list("user__email", flat=True)))
    if not recipients:
        return None
    return Email(to=recipients, subject=f"Your booking in {booking.pool} was cancelled",
                 template="billing/email/booking_cancelled",
                 context={"org": Organization.objects.get(pk=org_id), "booking": booking,
                          "refund": format_micros(charge.refund_micros) if charge else None},
                 one_per_recipient=True)


def booking_cancelled_email_queue(*, booking: Booking) -> None:
    """The notice of a booking cancelled by an operator or by a change of its pool."""
    email_queue(kind="billing.booking_cancelled", key=f"booking:{booking.pk}:cancelled",
                params={"org_id": booking.org_id, "booking_id": booking.pk})


def payment_failed_email_queue(*, invoice: Invoice) -> None:
    email_queue(kind="billing.payment_failed", key=f"invoice:{invoice.pk}:payment_failed",
                params={"org_id": invoice.org_id, "invoice_id": invoice.pk})


def suspended_for_payment_email_queue(*, org: Organization) -> None:
    email_queue(kind="billing.suspended_for_payment", params={"org_id": org.pk},
                key=f"org:{org.pk}:suspended_for_payment:{org.status_changed_at.isoformat()}")


def spend_alert_email_queue(*, org_id: int, month: str, threshold: int, cost_micros: int,
                            cap_micros: int) -> None:
    email_queue(kind="billing.spend_alert", key=f"org:{org_id}:spend_alert:{month}:{threshold}",
                params={"org_id": org_id, "threshold": threshold, "cost_micros": cost_micros,
                        "cap_micros": cap_micros})
