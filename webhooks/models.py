"""Webhooks to organizations (Standard Webhooks): endpoints, events and their deliveries."""

import secrets

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q
from django.utils import timezone

from orgs.models import Organization
from sluice.sealing import seal, unseal

# Its sealing key's purpose (sluice/sealing.py); migration 0002 names it too.
SECRET_PURPOSE = "webhook signing secret"  # noqa: S105 - a label, not a secret


class EventType(models.TextChoices):
    DAILY_QUOTA_THRESHOLD = "quota.daily_threshold", "Daily token quota at 50/80/100%"
    SPEND_THRESHOLD = "billing.spend_threshold", "Monthly spend at 50/80/100% of the cap"
    INVOICE_ISSUED = "invoice.issued", "Invoice issued"
    INVOICE_PAID = "invoice.paid", "Invoice paid"
    INVOICE_PAYMENT_FAILED = "invoice.payment_failed", "Invoice payment failed"
    ORG_ADMITTED = "organization.admitted", "Organization admitted"
    ORG_SUSPENDED = "organization.suspended", "Organization suspended"
    ORG_RESTORED = "organization.restored", "Organization restored"
    WAITLIST_POSITION = "waitlist.position_changed", "Waitlist position changed"
    WAVE_ADMITTED = "waitlist.wave_admitted", "Admitted in a rollout wave"
    BOOKING_CONFIRMED = "booking.confirmed", "Booking confirmed"
    BOOKING_STARTED = "booking.started", "Booked window started"
    BOOKING_ENDED = "booking.ended", "Booked window ended"
    BOOKING_CANCELLED = "booking.cancelled", "Booking cancelled"
    QUEUE_REFUSED = "queue.requests_refused", "Requests refused by the admission queue"


def event_id_new() -> str:
    return f"evt_{secrets.token_hex(12)}"


class WebhookEndpoint(models.Model):
    """Where an org wants its events. The signing secret (`whsec_` + base64 of 32 random bytes,
    the Standard Webhooks format) must be usable to sign, so it cannot be hashed: it is sealed
    (sluice/sealing.py; `signing_secret()` opens it), and only its first characters are kept in
    clear, to tell endpoints apart. The portal shows the secret once, at creation."""

    org = models.ForeignKey(Organization, on_delete=models.CASCADE,
                            related_name="webhook_endpoints")
    url = models.URLField(max_length=500)
    description = models.CharField(max_length=200, blank=True, default="")
    event_types = ArrayField(models.CharField(max_length=40, choices=EventType.choices))
    secret_sealed = models.TextField()
    secret_hint = models.CharField(max_length=12)  # "whsec_" and the secret's first 4 characters
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL,
                                   null=True, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    disabled_at = models.DateTimeField(null=True, blank=True)
    # A worker is delivering to it (leased until then), or it rests after an attempt ran into
    # the deadline (webhooks.delivery): no other worker takes it before.
    busy_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["org"], name="webhook_endpoint_org",
                                condition=Q(disabled_at__isnull=True))]

    def __str__(self) -> str:
        return self.url

    @staticmethod
    def secret_fields(secret: str) -> dict[str, str]:
        """What is stored of a signing secret."""
        return {"secret_sealed": seal(secret, purpose=SECRET_PURPOSE), "secret_hint": secret[:10]}

    def signing_secret(self) -> str:
        """Raises SealBroken when sealed under a key the settings no longer hold."""
        return unseal(self.secret_sealed, purpose=SECRET_PURPOSE)


class WebhookEvent(models.Model):
    """Something that happened to an org, recorded once: (org, key) is unique, and the key
    names the occurrence (the threshold and its period, the invoice, the transition), so
    workers that race to record it insert one row. `event_id` is the Standard Webhooks message
    id (`webhook-id`): every delivery and retry of the event carries it."""

    event_id = models.CharField(max_length=40, unique=True, default=event_id_new)
    org = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    type = models.CharField(max_length=40, choices=EventType.choices)
    key = models.CharField(max_length=200)
    data = models.JSONField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["org", "key"], name="webhook_event_once"),
        ]

    def __str__(self) -> str:
        return f"{self.type} {self.event_id}"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    DELIVERED = "delivered", "Delivered"
    DEAD = "dead", "Dead letter"


class WebhookDelivery(models.Model):
    """One event owed to one endpoint: written in the transaction that records the event, then
    delivered by webhooks.delivery like the Stripe outbox (claimed with a lease, retried with
    backoff, dead after MAX_ATTEMPTS; resent from the portal)."""

    event = models.ForeignKey(WebhookEvent, on_delete=models.CASCADE, related_name="deliveries")
    endpoint = models.ForeignKey(WebhookEndpoint, on_delete=models.CASCADE,
                                 related_name="deliveries")
    status = models.CharField(max_length=10, choices=DeliveryStatus.choices,
                              default=DeliveryStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    last_status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["event", "endpoint"], name="webhook_delivery_once"),
        ]
        indexes = [
            models.Index(fields=["next_attempt_at"], condition=Q(status="pending"),
                         name="webhook_delivery_due"),
            models.Index(fields=["endpoint", "-created_at"], name="webhook_delivery_endpoint"),
        ]

    def __str__(self) -> str:
        return f"{self.event_id} -> {self.endpoint_id} ({self.status})"


class WaitlistPositionNotice(models.Model):
    """The waitlist position last announced to an org, and how many changes were announced
    (the change number is part of the event's key)."""

    org = models.OneToOneField(Organization, on_delete=models.CASCADE, primary_key=True,
                               related_name="+")
    position = models.PositiveIntegerField()
    changes = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.org_id} at {self.position}"
