"""What the billing app announces (sluice/events.py says why events and how to subscribe).
Emitted inside the transaction that makes the change."""

from sluice.events import Event

invoice_issued = Event(
    "billing.invoice_issued", payload=("invoice",),
    doc="An invoice was created by a monthly close or a re-issue.")

invoice_paid = Event(
    "billing.invoice_paid", payload=("invoice",),
    doc="An open invoice was paid.")

invoice_payment_failed = Event(
    "billing.invoice_payment_failed", payload=("invoice",),
    doc="The first failed payment of an invoice (retries of the same charge are not announced "
        "again).")

spend_threshold_crossed = Event(
    "billing.spend_threshold_crossed",
    payload=("org_id", "month", "threshold", "cost_micros", "cap_micros"),
    doc="The month's cost reached `threshold` percent of the org's spend cap; announced once per "
        "org, month and threshold (the SpendAlert row's unique constraint).")

booking_confirmed = Event(
    "billing.booking_confirmed", payload=("booking", "charge"),
    doc="An org booked capacity and was charged for it (quotas.models.Booking, "
        "billing.models.BookingCharge).")

booking_cancelled = Event(
    "billing.booking_cancelled", payload=("booking", "charge"),
    doc="A booking was cancelled and its charge refunded by the rule (`charge` is None for a "
        "booking that was never charged).")
