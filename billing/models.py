"""Billing data. Money is integers: prices in micro-dollars per million tokens, invoice amounts in
cents. Rating (billing/rating.py) is the only place that turns tokens into money."""

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q
from django.utils import timezone

from billing.rating import (
    LIST_BOOKING_INPUT_MICROS_PER_TPS_HOUR,
    LIST_BOOKING_OUTPUT_MICROS_PER_TPS_HOUR,
)
from orgs.models import Organization
from quotas.models import Booking, CapacityPool

DEFAULT_ALERT_THRESHOLDS = [50, 80, 100]


def default_alert_thresholds() -> list[int]:
    return list(DEFAULT_ALERT_THRESHOLDS)


class PriceVersion(models.Model):
    """Prices of one pool from `effective_from` until the next version starts. Never updated:
    a price change is a new row, so an invoice can always be re-rated to the same cents.
    With `org` set it is a negotiated rate for that org and wins over the public version.
    Versions start on an hour boundary (checked by the service and by a constraint) so that
    every hourly rollup row falls under exactly one version."""

    pool = models.ForeignKey(CapacityPool, on_delete=models.PROTECT, related_name="+")
    org = models.ForeignKey(Organization, on_delete=models.PROTECT, null=True, blank=True,
                            related_name="+")
    effective_from = models.DateTimeField()
    input_micros_per_mtok = models.PositiveBigIntegerField()
    # Input tokens served from the upstream's cache; empty: the input price.
    cached_input_micros_per_mtok = models.PositiveBigIntegerField(null=True, blank=True)
    output_micros_per_mtok = models.PositiveBigIntegerField()
    premium_input_micros_per_mtok = models.PositiveBigIntegerField(default=0)
    premium_output_micros_per_mtok = models.PositiveBigIntegerField(default=0)
    # Booked capacity, per token/s and hour of a booking's window (billing/bookings.py).
    booking_output_micros_per_tps_hour = models.PositiveBigIntegerField(
        default=LIST_BOOKING_OUTPUT_MICROS_PER_TPS_HOUR)
    booking_input_micros_per_tps_hour = models.PositiveBigIntegerField(
        default=LIST_BOOKING_INPUT_MICROS_PER_TPS_HOUR)
    note = models.CharField(max_length=200, blank=True, default="")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT,
                                   null=True, blank=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["pool_id", "org_id", "effective_from"]
        constraints = [
            models.UniqueConstraint(fields=["pool", "org", "effective_from"],
                                    nulls_distinct=False, name="price_version_unique_start"),
            models.CheckConstraint(
                name="price_version_starts_on_hour",
                condition=Q(effective_from__minute=0, effective_from__second=0),
            ),
        ]

    def __str__(self) -> str:
        who = f" for org {self.org_id}" if self.org_id else ""
        return f"Prices of pool {self.pool_id}{who} from {self.effective_from:%Y-%m-%d %H:00}"


class BillingAccount(models.Model):
    """One per org, created on first use: Stripe customer, spend cap, discount and dunning."""

    org = models.OneToOneField(Organization, on_delete=models.CASCADE, primary_key=True,
                               related_name="billing_account")
    stripe_customer_id = models.CharField(max_length=64, blank=True, default="")
    # 0 means no cap. Micro-dollars, the unit of the admission engine's month counter.
    spend_cap_micros = models.PositiveBigIntegerField(default=0)
    alert_thresholds = ArrayField(models.PositiveSmallIntegerField(),
                                  default=default_alert_thresholds)
    # Basis points off every line of the org's invoices (negotiated rates are PriceVersions).
    discount_bps = models.PositiveIntegerField(default=0)
    # Dunning: set by invoice.payment_failed, cleared when the org has nothing left unpaid.
    payment_failed_at = models.DateTimeField(null=True, blank=True)
    grace_until = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(name="billing_discount_at_most_100pct",
                                   condition=Q(discount_bps__lte=10_000)),
        ]
        indexes = [models.Index(fields=["grace_until"], name="billing_account_grace")]

    def __str__(self) -> str:
        return f"Billing of {self.org_id}"


class SpendAlert(models.Model):
    """One row per org, month and threshold crossed: the unique constraint is what makes the
    email go out once."""

    org = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    month = models.DateField()
    threshold_pct = models.PositiveSmallIntegerField()
    cost_micros = models.PositiveBigIntegerField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["org", "month", "threshold_pct"],
                                    name="spend_alert_once"),
        ]

    def __str__(self) -> str:
        return f"{self.threshold_pct}% of cap for {self.org_id} in {self.month:%Y-%m}"


class InvoiceStatus(models.TextChoices):
    OPEN = "open", "Open (awaiting payment)"
    PAID = "paid", "Paid"
    VOID = "void", "Void"


class Invoice(models.Model):
    org = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="invoices")
    period_start = models.DateField()  # first day of the month
    period_end = models.DateField()  # first day of the next month (exclusive)
    revision = models.PositiveSmallIntegerField(default=1)
    number = models.CharField(max_length=40, unique=True)
    status = models.CharField(max_length=8, choices=InvoiceStatus.choices,
                              default=InvoiceStatus.OPEN)
    currency = models.CharField(max_length=3, default="usd")
    total_cents = models.BigIntegerField()
    replaces = models.OneToOneField("self", on_delete=models.PROTECT, null=True, blank=True,
                                    related_name="replaced_by")
    # A supplementary invoice: usage of a paid invoice's month reported after it was issued.
    # The month's main invoice (never itself a supplement) is the one this bills in addition to.
    supplements = models.ForeignKey("self", on_delete=models.PROTECT, null=True, blank=True,
                                    related_name="supplemented_by")
    issued_at = models.DateTimeField(default=timezone.now)
    paid_at = models.DateTimeField(null=True, blank=True)
    payment_failed_at = models.DateTimeField(null=True, blank=True)
    voided_at = models.DateTimeField(null=True, blank=True)
    void_reason = models.CharField(max_length=200, blank=True, default="")
    stripe_invoice_id = models.CharField(max_length=64, blank=True, default="")
    stripe_status = models.CharField(max_length=32, blank=True, default="")

    class Meta:
        ordering = ["-period_start", "-revision"]
        constraints = [
            # The idempotency of the monthly close: a second close (or a concurrent one) hits
            # this constraint and returns the invoice that is already there. Supplements of
            # late usage are not the month's invoice: a month may have several.
            models.UniqueConstraint(fields=["org", "period_start"],
                                    condition=~Q(status="void") & Q(supplements__isnull=True),
                                    name="invoice_one_live_per_org_month"),
            models.UniqueConstraint(fields=["org", "period_start", "revision"],
                                    name="invoice_revision_unique"),
            models.CheckConstraint(name="invoice_status_valid",
                                   condition=Q(status__in=InvoiceStatus.values)),
            # What is owed is never negative: a credit is carried instead.
            models.CheckConstraint(name="invoice_total_not_negative",
                                   condition=Q(total_cents__gte=0)),
        ]
        indexes = [
            models.Index(fields=["org", "-period_start"], name="invoice_org_period"),
            models.Index(fields=["status", "-period_start"], name="invoice_status_period"),
        ]

    def __str__(self) -> str:
        return self.number


class LineKind(models.TextChoices):
    INPUT = "input", "Input tokens"
    CACHED_INPUT = "cached_input", "Cached input tokens"
    OUTPUT = "output", "Output tokens"
    PREMIUM_INPUT = "premium_input", "Fast-tier premium, input tokens"
    PREMIUM_OUTPUT = "premium_output", "Fast-tier premium, output tokens"
    SPEED_CREDIT = "speed_credit", "Speed credit"
    BOOKING = "booking", "Booked capacity"
    BOOKING_REFUND = "booking_refund", "Booking refund"
    DISCOUNT = "discount", "Discount"
    # An invoice never totals below zero: a month whose refunds exceed its charges carries
    # the difference as a credit to the next invoices (billing/services/invoices.py).
    CREDIT_CARRIED = "credit_carried", "Credit carried to the next invoice"
    CREDIT_APPLIED = "credit_applied", "Credit from earlier invoices"


class InvoiceLine(models.Model):
    invoice = models.ForeignKey(Invoice, on_delete=models.CASCADE, related_name="lines")
    position = models.PositiveSmallIntegerField()
    kind = models.CharField(max_length=16, choices=LineKind.choices)
    pool = models.ForeignKey(CapacityPool, on_delete=models.PROTECT, null=True, blank=True,
                             related_name="+")
    price_version = models.ForeignKey(PriceVersion, on_delete=models.PROTECT, null=True,
                                      blank=True, related_name="+")
    # A booking's own line (its charge, or its refund): one per booking, never summed.
    booking = models.ForeignKey(Booking, on_delete=models.PROTECT, null=True, blank=True,
                                related_name="+")
    description = models.CharField(max_length=200)
    quantity_tokens = models.PositiveBigIntegerField(default=0)
    unit_micros_per_mtok = models.BigIntegerField(default=0)
    amount_cents = models.BigIntegerField()

    class Meta:
        ordering = ["invoice_id", "position"]
        constraints = [
            models.UniqueConstraint(fields=["invoice", "position"], name="invoice_line_position"),
        ]

    def __str__(self) -> str:
        return f"{self.description}: {self.amount_cents}¢"


class BookingCharge(models.Model):
    """What a booking costs its org. Charged when confirmed, on the invoice of that month, and
    counted against that month's spend cap; a refund is credited on the invoice of the month
    the booking was cancelled in (billing/bookings.py says how much)."""

    booking = models.OneToOneField(Booking, on_delete=models.PROTECT, primary_key=True,
                                   related_name="charge")
    org = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="+")
    # The version in force at the window's start (None: list prices); an hour a later version
    # covers is priced by it, like usage.
    price_version = models.ForeignKey(PriceVersion, on_delete=models.PROTECT, null=True,
                                      blank=True, related_name="+")
    amount_micros = models.PositiveBigIntegerField()
    charged_at = models.DateTimeField()
    refund_micros = models.PositiveBigIntegerField(default=0)
    refunded_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(name="booking_refund_at_most_charge",
                                   condition=Q(refund_micros__lte=models.F("amount_micros"))),
        ]
        indexes = [models.Index(fields=["org", "charged_at"], name="booking_charge_org_at"),
                   models.Index(fields=["org", "refunded_at"], name="booking_refund_org_at",
                                condition=Q(refunded_at__isnull=False))]

    def __str__(self) -> str:
        return f"Booking {self.booking_id}: {self.amount_micros} micro-dollars"


class OutboxKind(models.TextChoices):
    CUSTOMER_SYNC = "customer_sync", "Create the Stripe customer"
    INVOICE_PUSH = "invoice_push", "Push an invoice to Stripe and finalize it"
    INVOICE_VOID = "invoice_void", "Void an invoice in Stripe"


class OutboxStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    DONE = "done", "Done"
    DEAD = "dead", "Dead letter"


class OutboxMessage(models.Model):
    """A Stripe call owed, written in the same transaction as the change that needs it and
    delivered by billing.services.outbox. Idempotency keys sent to Stripe derive from this
    row's kind and the ids it names, never from the attempt, so a retry cannot act twice."""

    kind = models.CharField(max_length=16, choices=OutboxKind.choices)
    org = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="+")
    invoice = models.ForeignKey(Invoice, on_delete=models.PROTECT, null=True, blank=True,
                                related_name="outbox_messages")
    status = models.CharField(max_length=8, choices=OutboxStatus.choices,
                              default=OutboxStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    # Doubles as a lease: a worker claiming the row pushes it forward before calling Stripe.
    next_attempt_at = models.DateTimeField(default=timezone.now)
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    done_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["kind", "org", "invoice"], nulls_distinct=False,
                                    name="outbox_one_per_subject"),
        ]
        indexes = [
            models.Index(fields=["next_attempt_at"], condition=Q(status="pending"),
                         name="outbox_pending_due"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} #{self.pk} ({self.status})"


class StripeEventStatus(models.TextChoices):
    RECEIVED = "received", "Received"
    PROCESSED = "processed", "Processed"
    IGNORED = "ignored", "Ignored (type not handled)"
    FAILED = "failed", "Failed"


class StripeEvent(models.Model):
    """Every verified webhook, stored once by Stripe's event id."""

    event_id = models.CharField(max_length=64, unique=True)
    type = models.CharField(max_length=64)
    payload = models.JSONField()
    status = models.CharField(max_length=12, choices=StripeEventStatus.choices,
                              default=StripeEventStatus.RECEIVED)
    error = models.TextField(blank=True, default="")
    received_at = models.DateTimeField(default=timezone.now)
    processed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-received_at"]
        indexes = [models.Index(fields=["status", "-received_at"], name="stripe_event_status")]

    def __str__(self) -> str:
        return f"{self.type} {self.event_id}"
