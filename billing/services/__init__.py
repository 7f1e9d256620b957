"""Every state change of billing. Views, admin actions, tasks and commands call these."""

from billing.services.accounts import billing_account_for, discount_set, spend_cap_set
from billing.services.bookings import booking_confirm, booking_refund
from billing.services.caps import (
    SpendCapReached,
    spend_alerts_evaluate,
    spend_alerts_evaluate_all,
    spend_cap_check,
    spend_status,
)
from billing.services.dunning import dunning_enforce, invoice_paid, invoice_payment_failed
from billing.services.invoices import (
    invoice_bill_late_usage,
    invoice_close_month,
    invoice_reissue,
    invoice_void,
    invoices_bill_late_usage,
    invoices_close_previous_month,
)
from billing.services.outbox import outbox_deliver, outbox_drain, outbox_enqueue, outbox_retry
from billing.services.prices import price_version_create
from billing.services.stripe_sync import stripe_customer_enqueue, stripe_customer_ensure
from billing.services.webhooks import (
    stripe_event_process,
    stripe_event_record,
    stripe_event_retry,
)

__all__ = [
    "SpendCapReached",
    "billing_account_for",
    "booking_confirm",
    "booking_refund",
    "discount_set",
    "dunning_enforce",
    "invoice_bill_late_usage",
    "invoice_close_month",
    "invoice_paid",
    "invoice_payment_failed",
    "invoice_reissue",
    "invoice_void",
    "invoices_bill_late_usage",
    "invoices_close_previous_month",
    "outbox_deliver",
    "outbox_drain",
    "outbox_enqueue",
    "outbox_retry",
    "price_version_create",
    "spend_alerts_evaluate",
    "spend_alerts_evaluate_all",
    "spend_cap_check",
    "spend_cap_set",
    "spend_status",
    "stripe_customer_enqueue",
    "stripe_customer_ensure",
    "stripe_event_process",
    "stripe_event_retry",
    "stripe_event_record",
]
