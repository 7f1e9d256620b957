"""Delivering webhooks: Standard Webhooks signatures, outbox discipline, one endpoint at a time.

What a receiver gets (https://www.standardwebhooks.com/):
- body: `{"type": "<event type>", "timestamp": "<ISO 8601 of the event>", "data": {...}}`
- `webhook-id`: the event's id (`evt_...`), the same on every retry and resend;
- `webhook-timestamp`: unix seconds of this attempt;
- `webhook-signature`: `v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">` with the
  endpoint's secret (`whsec_...`).
A receiver verifies the signature (the `standardwebhooks` library does), refuses timestamps
more than five minutes away from its clock (a replayed old request), and remembers the ids it
processed (a replay within the tolerance). Any 2xx is success; anything else, a timeout or a
refused connection is retried with backoff; redirects are not followed (they count as failures).
How one POST is bounded (deadline, what is read, the SSRF guard): webhooks/posting.py.

Outbox discipline (as billing/services/outbox.py): a worker claims a due delivery with a
conditional UPDATE that also pushes `next_attempt_at` out by a lease, so two workers never post
the same delivery at once; beat drains what a lost task left behind.

One endpoint, one worker: an attempt first leases its endpoint (`busy_until`, a conditional
UPDATE again). The worker holding the lease delivers the endpoint's due deliveries one after
the other, and stops at the first failure or after ENDPOINT_TURN_SECONDS (then queues a new
turn, so other endpoints get the worker). Any other worker that finds the endpoint leased
leaves its deliveries to the holder. So an endpoint holds at most one worker at a time; one
that lets an attempt run into the deadline also rests for ENDPOINT_REST after it, so a slow
endpoint costs a worker one deadline per rest at most, and other orgs' deliveries go on.
"""

import json
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db.models import F, Q
from django.utils import timezone
from standardwebhooks.webhooks import Webhook

from billing.services.outbox import backoff_after
from sluice.sealing import SealBroken
from webhooks.models import DeliveryStatus, WebhookDelivery, WebhookEndpoint, WebhookEvent
from webhooks.posting import DeliveryFailed, DeliveryTooSlow, webhook_post

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 8  # 30 s, 1, 2, 4, 8, 16, 32 min: about an hour of retries, then a dead letter
LEASE = timedelta(minutes=2)  # longer than any attempt (the deadline is at most 60 s)
ENDPOINT_TURN_SECONDS = 30
ENDPOINT_REST = timedelta(minutes=1)
USER_AGENT = "Sluice-Webhooks/1"


def webhook_body(event: WebhookEvent) -> str:
    return json.dumps({"type": event.type, "timestamp": event.created_at.isoformat(),
                       "data": event.data}, separators=(",", ":"), sort_keys=True)


def webhook_headers(*, secret: str, event_id: str, body: str, at: datetime) -> dict[str, str]:
    at = at.astimezone(UTC)
    return {"content-type": "application/json", "user-agent": USER_AGENT,
            "webhook-id": event_id, "webhook-timestamp": str(int(at.timestamp())),
            "webhook-signature": Webhook(secret).sign(msg_id=event_id, timestamp=at, data=body)}


def _endpoint_lease(endpoint_id: int, now: datetime) -> bool:
    return WebhookEndpoint.objects.filter(
        Q(busy_until__isnull=True) | Q(busy_until__lte=now), pk=endpoint_id,
    ).update(busy_until=now + LEASE) == 1


def _endpoint_release(endpoint_id: int, *, rest_until: datetime | None) -> None:
    WebhookEndpoint.objects.filter(pk=endpoint_id).update(busy_until=rest_until)


def _claim(delivery_id: int, now: datetime) -> bool:
    return WebhookDelivery.objects.filter(
        pk=delivery_id, status=DeliveryStatus.PENDING, next_attempt_at__lte=now,
    ).update(attempts=F("attempts") + 1, next_attempt_at=now + LEASE) == 1


def _failed(delivery: WebhookDelivery, *, now: datetime, error: str,
            status_code: int | None = None) -> str:
    dead = delivery.attempts >= MAX_ATTEMPTS or delivery.endpoint.disabled_at is not None
    status = DeliveryStatus.DEAD if dead else DeliveryStatus.PENDING
    fields = {"status": status, "last_error": error[:2000], "last_status_code": status_code}
    if not dead:
        fields["next_attempt_at"] = now + backoff_after(delivery.attempts)
    WebhookDelivery.objects.filter(pk=delivery.pk).update(**fields)
    return status


@dataclass(frozen=True)
class Attempt:
    status: str  # the delivery's status afterwards, or "skipped" (not due, or someone has it)
    too_slow: bool = False


def _attempt(delivery_id: int, now: datetime) -> Attempt:
    """One attempt at a due delivery, its endpoint leased by the caller."""
    if not _claim(delivery_id, now):
        return Attempt("skipped")
    delivery = WebhookDelivery.objects.select_related("event", "endpoint").get(pk=delivery_id)
    endpoint = delivery.endpoint
    if endpoint.disabled_at is not None:
        return Attempt(_failed(delivery, now=now, error="endpoint disabled"))
    try:
        body = webhook_body(delivery.event)
        headers = webhook_headers(secret=endpoint.signing_secret(),
                                  event_id=delivery.event.event_id, body=body,
                                  at=timezone.now())
        answer = webhook_post(url=endpoint.url, body=body.encode(), headers=headers)
    except SealBroken:
        logger.error("webhook endpoint %s: its signing secret does not open (was "
                     "SLUICE_SECRET_KEY rotated without SLUICE_SECRET_KEY_FALLBACKS?)", endpoint.pk)
        return Attempt(_failed(delivery, now=now, error="signing secret unavailable (secret "
                                                        "key rotated without its fallback)"))
    except DeliveryFailed as exc:
        return Attempt(_failed(delivery, now=now, error=str(exc)),
                       too_slow=isinstance(exc, DeliveryTooSlow))
    if not 200 <= answer.status < 300:
        error = f"HTTP {answer.status}" + (f": {answer.excerpt}" if answer.excerpt else "")
        return Attempt(_failed(delivery, now=now, error=error, status_code=answer.status))
    WebhookDelivery.objects.filter(pk=delivery.pk).update(
        status=DeliveryStatus.DELIVERED, last_status_code=answer.status, last_error="",
        delivered_at=timezone.now())
    return Attempt(DeliveryStatus.DELIVERED)


def _rest_after(attempt: Attempt) -> datetime | None:
    return timezone.now() + ENDPOINT_REST if attempt.too_slow else None


def webhook_deliver(*, delivery_id: int, now: datetime | None = None) -> str:
    """Attempt one delivery if it is due; returns its status afterwards ('skipped' if it is
    not due or another worker holds it, 'endpoint_busy' if another worker is delivering to
    its endpoint: that worker takes it along). Never inside a transaction: no lock is held
    over HTTP."""
    now = now or timezone.now()
    endpoint_id = (WebhookDelivery.objects.filter(pk=delivery_id)
                   .values_list("endpoint_id", flat=True).first())
    if endpoint_id is None:
        return "skipped"
    if not _endpoint_lease(endpoint_id, now):
        return "endpoint_busy"
    attempt = Attempt("skipped")
    try:
        attempt = _attempt(delivery_id, now)
    finally:
        _endpoint_release(endpoint_id, rest_until=_rest_after(attempt))
    return attempt.status


def _due(endpoint_id: int, now: datetime) -> list[int]:
    return list(WebhookDelivery.objects.filter(
        endpoint_id=endpoint_id, status=DeliveryStatus.PENDING, next_attempt_at__lte=now,
    ).order_by("next_attempt_at", "id").values_list("pk", flat=True)[:100])


@dataclass(frozen=True)
class EndpointTurn:
    counts: dict[str, int]
    more: bool  # stopped for the turn's end with deliveries still due: queue another turn


def webhook_endpoint_deliver(*, endpoint_id: int, now: datetime | None = None) -> EndpointTurn:
    """One turn at an endpoint: its due deliveries, oldest first, until none is due, one
    fails, or ENDPOINT_TURN_SECONDS have gone. Nothing if another worker has the endpoint."""
    now = now or timezone.now()
    counts: dict[str, int] = {}
    if not _endpoint_lease(endpoint_id, now):
        return EndpointTurn(counts={"endpoint_busy": 1}, more=False)
    started, attempt, more = time.monotonic(), Attempt("skipped"), False
    try:
        for delivery_id in _due(endpoint_id, now):
            if time.monotonic() - started >= ENDPOINT_TURN_SECONDS:
                more = True
                break
            attempt = _attempt(delivery_id, now)
            counts[attempt.status] = counts.get(attempt.status, 0) + 1
            if attempt.status not in (DeliveryStatus.DELIVERED, "skipped"):
                break  # it failed: the endpoint's other deliveries wait for their own retry
    finally:
        _endpoint_release(endpoint_id, rest_until=_rest_after(attempt))
    return EndpointTurn(counts=counts, more=more)


def webhooks_due_endpoints(*, now: datetime | None = None, limit: int = 1000) -> list[int]:
    """Endpoints with a due delivery that no worker holds or rests (beat hands each a turn)."""
    now = now or timezone.now()
    return list(WebhookDelivery.objects.filter(
        Q(endpoint__busy_until__isnull=True) | Q(endpoint__busy_until__lte=now),
        status=DeliveryStatus.PENDING, next_attempt_at__lte=now,
    ).order_by("endpoint_id").values_list("endpoint_id", flat=True).distinct()[:limit])


def webhooks_drain(*, now: datetime | None = None) -> int:
    """Beat, every minute: a turn for each endpoint with due deliveries, each its own task,
    so no endpoint waits behind another. Returns how many turns were queued."""
    from webhooks.tasks import webhook_endpoint_deliver_task  # the tasks module imports this one

    endpoint_ids = webhooks_due_endpoints(now=now)
    for endpoint_id in endpoint_ids:
        webhook_endpoint_deliver_task.delay(endpoint_id, now.isoformat() if now else None)
    return len(endpoint_ids)
