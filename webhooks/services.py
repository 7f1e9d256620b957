"""Webhook endpoints and events: every state change of the webhooks app.

`webhook_event_record` runs inside the transaction of the change it announces (an org's
transition, an invoice, a threshold's alert row): the event and one delivery per subscribed
endpoint commit with it or not at all, and are delivered after the commit (webhooks.delivery).
"""

import base64
import secrets
from urllib.parse import urlsplit

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from orgs.models import Organization
from orgs.services.audit import Actor, audit_record
from sluice.errors import Conflict, DomainError, IllegalTransition
from sluice.sealing import SealBroken, reseal
from sluice.transactions import nested_atomic
from webhooks.models import (
    SECRET_PURPOSE,
    DeliveryStatus,
    EventType,
    WebhookDelivery,
    WebhookEndpoint,
    WebhookEvent,
)

SECRET_PREFIX = "whsec_"  # noqa: S105 - the Standard Webhooks prefix, not a secret


def _kick_later(endpoint_ids: list[int]) -> None:
    """A turn for each endpoint after the commit (webhooks.delivery: one worker per endpoint)."""
    from webhooks.tasks import webhook_endpoint_deliver_task

    transaction.on_commit(lambda: [webhook_endpoint_deliver_task.delay(i)
                                   for i in sorted(set(endpoint_ids))])


def endpoint_url_check(url: str) -> str:
    """https only, unless development allows http (SLUICE_WEBHOOKS_ALLOW_PRIVATE); where the
    name points is checked again at each delivery (webhooks.delivery)."""
    parts = urlsplit(url)
    schemes = {"https", "http"} if settings.WEBHOOKS_ALLOW_PRIVATE else {"https"}
    if parts.scheme not in schemes or not parts.hostname:
        raise DomainError("The endpoint URL must be https://.", code="invalid_url",
                          fields={"url": ["The endpoint URL must be https://."]})
    return url


@transaction.atomic(durable=True)
def webhook_endpoint_create(*, org: Organization, url: str, event_types: list[str],
                            description: str, actor: Actor) -> tuple[WebhookEndpoint, str]:
    """Returns the endpoint and its signing secret (shown once by the portal)."""
    unknown = set(event_types) - set(EventType.values)
    if not event_types or unknown:
        raise DomainError("Choose the events to send.", code="invalid_event_types",
                          fields={"event_types": ["Choose at least one known event type."]})
    secret = SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()
    endpoint = WebhookEndpoint.objects.create(
        org=org, url=endpoint_url_check(url), event_types=sorted(set(event_types)),
        description=description.strip(), **WebhookEndpoint.secret_fields(secret),
        created_by=actor if not isinstance(actor, str) else None)
    audit_record(actor=actor, action="webhook_endpoint.create", target=endpoint, org=org,
                 after={"url": url, "event_types": endpoint.event_types})
    return endpoint, secret


@transaction.atomic(durable=True)
def webhook_endpoint_disable(*, endpoint: WebhookEndpoint, actor: Actor) -> WebhookEndpoint:
    """No new deliveries; pending ones end as dead letters at their next attempt."""
    endpoint = WebhookEndpoint.objects.select_for_update().get(pk=endpoint.pk)
    if endpoint.disabled_at is not None:
        raise Conflict("This endpoint is already disabled.", code="already_disabled")
    endpoint.disabled_at = timezone.now()
    endpoint.save(update_fields=["disabled_at"])
    audit_record(actor=actor, action="webhook_endpoint.disable", target=endpoint,
                 org=endpoint.org)
    return endpoint


@transaction.atomic(durable=True)
def webhook_endpoint_secrets_reseal() -> tuple[int, list[int]]:
    """Every endpoint's signing secret sealed again under the current SLUICE_SECRET_KEY, from
    whichever of its fallbacks sealed it (after a rotation, before the fallback is removed):
    (how many were sealed again, the ids of those that open with no configured key, which
    are left as they are). The secrets themselves do not change."""
    resealed, broken = 0, []
    for endpoint in WebhookEndpoint.objects.select_for_update().only("pk", "secret_sealed"):
        try:
            sealed = reseal(endpoint.secret_sealed, purpose=SECRET_PURPOSE)
        except SealBroken:
            broken.append(endpoint.pk)
            continue
        WebhookEndpoint.objects.filter(pk=endpoint.pk).update(secret_sealed=sealed)
        resealed += 1
    return resealed, broken


@nested_atomic
def webhook_event_record(*, org_id: int, type: str, key: str, data: dict
                         ) -> WebhookEvent | None:
    """Record the event once per (org, key) and owe it to every enabled endpoint of the org
    that subscribed to `type`. None when nobody subscribed (nothing is recorded: an endpoint
    added later still gets a threshold crossed again in the same period) or when the event
    was already recorded, by this worker or a racing one (the unique constraint decides)."""
    endpoints = list(WebhookEndpoint.objects.filter(
        org_id=org_id, disabled_at__isnull=True, event_types__contains=[type]).only("pk"))
    if not endpoints:
        return None
    try:
        with transaction.atomic():
            event = WebhookEvent.objects.create(org_id=org_id, type=type, key=key, data=data)
    except IntegrityError:
        return None
    WebhookDelivery.objects.bulk_create(
        WebhookDelivery(event=event, endpoint=endpoint) for endpoint in endpoints)
    _kick_later([endpoint.pk for endpoint in endpoints])
    return event


@transaction.atomic(durable=True)
def webhook_delivery_resend(*, delivery: WebhookDelivery, actor: Actor) -> WebhookDelivery:
    """A dead letter back to pending, due now, attempts reset. It keeps its event id, so a
    receiver that did get it before recognises it."""
    locked = WebhookDelivery.objects.select_for_update(of=("self",)).select_related(
        "endpoint").get(pk=delivery.pk)
    if locked.status != DeliveryStatus.DEAD:
        raise IllegalTransition("Only a dead letter can be resent.",
                                details={"status": locked.status})
    if locked.endpoint.disabled_at is not None:
        raise Conflict("The endpoint is disabled.", code="endpoint_disabled")
    before = {"status": locked.status, "last_error": locked.last_error}
    locked.status, locked.attempts, locked.next_attempt_at = (
        DeliveryStatus.PENDING, 0, timezone.now())
    locked.save(update_fields=["status", "attempts", "next_attempt_at"])
    audit_record(actor=actor, action="webhook_delivery.resend", target=locked,
                 org=locked.endpoint.org, before=before, after={"status": locked.status})
    _kick_later([locked.endpoint_id])
    return locked
