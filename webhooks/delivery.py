"""Delivering webhooks: Standard Webhooks signatures, outbox discipline, an SSRF guard.

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

Outbox discipline (as billing/services/outbox.py): a worker claims a due delivery with a
conditional UPDATE that also pushes `next_attempt_at` out by a lease, so two workers never post
the same delivery at once; beat drains what a lost task left behind.

SSRF guard: the host is resolved once per attempt, every address must be public (no loopback,
private, link-local, multicast or reserved ranges, nor an IPv6 form that reaches a non-public
IPv4 address: webhooks/addresses.py; SLUICE_WEBHOOKS_ALLOW_PRIVATE lifts this for
development and tests), and the request goes to the checked address (Host and TLS SNI keep the
name), so a name cannot be re-pointed at an internal address between check and connection.
"""

import json
import logging
import socket
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit, urlunsplit

import httpx
from django.conf import settings
from django.db.models import F
from django.utils import timezone
from standardwebhooks.webhooks import Webhook

from billing.services.outbox import backoff_after
from sluice.sealing import SealBroken
from webhooks.addresses import address_public
from webhooks.models import DeliveryStatus, WebhookDelivery, WebhookEvent

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 8  # 30 s, 1, 2, 4, 8, 16, 32 min: about an hour of retries, then a dead letter
LEASE = timedelta(minutes=2)
TIMEOUT = httpx.Timeout(10.0, connect=5.0)
USER_AGENT = "Sluice-Webhooks/1"


class DeliveryFailed(Exception):
    pass


def webhook_body(event: WebhookEvent) -> str:
    return json.dumps({"type": event.type, "timestamp": event.created_at.isoformat(),
                       "data": event.data}, separators=(",", ":"), sort_keys=True)


def webhook_headers(*, secret: str, event_id: str, body: str, at: datetime) -> dict[str, str]:
    at = at.astimezone(UTC)
    return {"content-type": "application/json", "user-agent": USER_AGENT,
            "webhook-id": event_id, "webhook-timestamp": str(int(at.timestamp())),
            "webhook-signature": Webhook(secret).sign(msg_id=event_id, timestamp=at, data=body)}


def _address_allowed(address: str) -> bool:
    return settings.WEBHOOKS_ALLOW_PRIVATE or address_public(address)


def _pinned(url: str) -> tuple[str, str, str]:
    """(url with the checked address as host, Host header, SNI name)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise DeliveryFailed(f"cannot resolve {host}: {exc}") from exc
    addresses = [info[4][0] for info in infos]
    if not addresses or not all(_address_allowed(a) for a in addresses):
        raise DeliveryFailed(f"{host} resolves to a private or reserved address")
    address = addresses[0]
    netloc = f"[{address}]" if ":" in address else address
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc)), parts.netloc.rpartition("@")[2], host


def webhook_post(*, url: str, secret: str, event: WebhookEvent, at: datetime) -> int:
    """POST one signed event; returns the HTTP status. DeliveryFailed when nothing answered."""
    body = webhook_body(event)
    target, host_header, sni = _pinned(url)
    headers = webhook_headers(secret=secret, event_id=event.event_id, body=body, at=at)
    try:
        with httpx.Client(timeout=TIMEOUT, follow_redirects=False) as client:
            response = client.post(target, content=body.encode(),
                                   headers={**headers, "host": host_header},
                                   extensions={"sni_hostname": sni})
    except httpx.HTTPError as exc:
        raise DeliveryFailed(f"{type(exc).__name__}: {exc}") from exc
    return response.status_code


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


def webhook_deliver(*, delivery_id: int, now: datetime | None = None) -> str:
    """Attempt one delivery if it is due; returns its status afterwards ('skipped' if another
    worker holds it or it is not due). Never inside a transaction: no lock is held over HTTP."""
    now = now or timezone.now()
    if not _claim(delivery_id, now):
        return "skipped"
    delivery = WebhookDelivery.objects.select_related("event", "endpoint").get(pk=delivery_id)
    endpoint = delivery.endpoint
    if endpoint.disabled_at is not None:
        return _failed(delivery, now=now, error="endpoint disabled")
    try:
        code = webhook_post(url=endpoint.url, secret=endpoint.signing_secret(),
                            event=delivery.event, at=timezone.now())
    except SealBroken:
        logger.error("webhook endpoint %s: its signing secret does not open (was "
                     "SLUICE_SECRET_KEY rotated without SLUICE_SECRET_KEY_FALLBACKS?)", endpoint.pk)
        return _failed(delivery, now=now, error="signing secret unavailable (secret key "
                                                "rotated without its fallback)")
    except DeliveryFailed as exc:
        return _failed(delivery, now=now, error=str(exc))
    if not 200 <= code < 300:
        return _failed(delivery, now=now, error=f"HTTP {code}", status_code=code)
    WebhookDelivery.objects.filter(pk=delivery.pk).update(
        status=DeliveryStatus.DELIVERED, last_status_code=code, last_error="",
        delivered_at=timezone.now())
    return DeliveryStatus.DELIVERED


def webhooks_drain(*, now: datetime | None = None, limit: int = 500) -> dict[str, int]:
    """Beat, every minute: every due delivery, oldest first."""
    now = now or timezone.now()
    due = list(WebhookDelivery.objects.filter(status=DeliveryStatus.PENDING,
                                              next_attempt_at__lte=now)
               .order_by("next_attempt_at", "id").values_list("pk", flat=True)[:limit])
    counts: dict[str, int] = {}
    for delivery_id in due:
        result = webhook_deliver(delivery_id=delivery_id, now=now)
        counts[result] = counts.get(result, 0) + 1
    return counts
