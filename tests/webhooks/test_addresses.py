"""The SSRF guard on IPv6 forms that carry an IPv4 address, and on deprecated ranges: judged
by the embedded IPv4 address, or refused whatever they carry."""

import pytest

from tests.factories import OrganizationFactory
from webhooks.addresses import address_public
from webhooks.delivery import webhook_deliver
from webhooks.models import DeliveryStatus, EventType, WebhookDelivery, WebhookEvent
from webhooks.services import webhook_endpoint_create

# (address, public?): each embedding form on both sides of its IPv4 rule.
CASES = [
    ("64:ff9b::a00:1", False),          # NAT64 of 10.0.0.1
    ("64:ff9b::7f00:1", False),         # NAT64 of 127.0.0.1
    ("64:ff9b::a9fe:a9fe", False),      # NAT64 of 169.254.169.254 (cloud metadata)
    ("64:ff9b::808:808", True),         # NAT64 of 8.8.8.8
    ("2002:a00:1::1", False),           # 6to4 of 10.0.0.1
    ("2002:7f00:1::", False),           # 6to4 of 127.0.0.1
    ("2002:808:808::1", True),          # 6to4 of 8.8.8.8
    ("::ffff:10.0.0.1", False),         # IPv4-mapped
    ("::ffff:8.8.8.8", True),
    ("::10.0.0.1", False),              # IPv4-compatible: refused whatever it carries
    ("::8.8.8.8", False),
    ("fec0::1", False),                 # site-local
    ("feff:ffff::1", False),            # the top of fec0::/10
    ("ff00::", False),                  # just above it: multicast
    ("64:ff9b:1::808:808", False),      # local-use NAT64
    ("2001::1", False),                 # Teredo
    ("2001:4860:4860::8888", True),     # an ordinary public IPv6 address
    ("fe80::1%eth0", False),
    ("::1", False),
    ("8.8.8.8", True),
    ("100.64.0.1", False),              # carrier-grade NAT
]


@pytest.mark.parametrize(("address", "public"), CASES)
def test_address_public(address, public):
    assert address_public(address) is public


@pytest.mark.django_db
@pytest.mark.parametrize("host", ["64:ff9b::7f00:1", "2002:7f00:1::", "::127.0.0.1",
                                  "fec0::1"])
def test_a_delivery_to_an_embedding_form_is_refused_before_connecting(settings, host):
    settings.WEBHOOKS_ALLOW_PRIVATE = False
    org = OrganizationFactory()
    endpoint, _ = webhook_endpoint_create(org=org, url=f"https://[{host}]:9/hooks",
                                          event_types=[EventType.ORG_ADMITTED],
                                          description="", actor="test")
    event = WebhookEvent.objects.create(org=org, type=EventType.ORG_ADMITTED, key="k", data={})
    delivery = WebhookDelivery.objects.create(event=event, endpoint=endpoint)
    assert webhook_deliver(delivery_id=delivery.pk) == DeliveryStatus.PENDING
    delivery.refresh_from_db()
    assert "private or reserved" in delivery.last_error
