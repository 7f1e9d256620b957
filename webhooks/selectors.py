"""Reads of the webhooks app, always scoped to an org."""

from django.db.models import Case, Count, Q, QuerySet, Value, When

from orgs.models import Organization
from sluice.errors import NotFound
from webhooks.models import DeliveryStatus, WebhookDelivery, WebhookEndpoint

RECENT_DELIVERIES = 50


def org_webhook_endpoints(*, org: Organization) -> QuerySet[WebhookEndpoint]:
    """With each endpoint's count of dead letters (one query for the list)."""
    return WebhookEndpoint.objects.filter(org=org).annotate(
        dead=Count("deliveries", filter=Q(deliveries__status=DeliveryStatus.DEAD)))


def org_webhook_endpoint_get(*, org: Organization, endpoint_id: int) -> WebhookEndpoint:
    endpoint = org_webhook_endpoints(org=org).filter(pk=endpoint_id).first()
    if endpoint is None:
        raise NotFound("No such webhook endpoint.")
    return endpoint


def endpoint_deliveries(*, endpoint: WebhookEndpoint) -> QuerySet[WebhookDelivery]:
    """Dead letters first (they wait for a person), then the most recent."""
    return (WebhookDelivery.objects.filter(endpoint=endpoint).select_related("event")
            .alias(waiting=Case(When(status=DeliveryStatus.DEAD, then=Value(0)), default=1))
            .order_by("waiting", "-created_at", "-id"))


def org_webhook_delivery_get(*, org: Organization, delivery_id: int) -> WebhookDelivery:
    delivery = (WebhookDelivery.objects.filter(pk=delivery_id, endpoint__org=org)
                .select_related("endpoint").first())
    if delivery is None:
        raise NotFound("No such delivery.")
    return delivery
