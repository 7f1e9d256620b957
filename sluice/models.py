"""Kernel data: the email outbox."""

from django.db import models


class EmailStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    SENDING = "sending", "Sending"
    SENT = "sent", "Sent"
    FAILED = "failed", "Failed"


class OutboundEmail(models.Model):
    """One email (to one or several recipients, one message each), written in the
    transaction whose change calls for it, built and delivered after the commit
    (sluice/mail.py). `key` makes queueing idempotent; the pending -> sending claim makes
    delivery at most once, so a worker that dies after handing the message to the mail server
    never sends it again (the row stays `sending`, visible to operators)."""

    key = models.CharField(max_length=200, unique=True)
    kind = models.CharField(max_length=60)  # a builder registered with sluice.mail.email_kind
    # The builder's keyword arguments: ids, never secrets (a builder makes the tokens an
    # email carries, e.g. invitation links, from committed state). Cleared once sent.
    params = models.JSONField(default=dict, blank=True)
    recipients = models.TextField(blank=True)  # who it went to, filled in when sent
    status = models.CharField(max_length=10, choices=EmailStatus.choices,
                              default=EmailStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["status", "next_attempt_at"],
                                condition=models.Q(status="pending"), name="email_due")]

    def __str__(self) -> str:
        return f"{self.kind} {self.key} ({self.status})"
