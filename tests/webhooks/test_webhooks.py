"""Webhooks to organizations: Standard Webhooks signatures, once per occurrence, outbox delivery
with retries and dead letters, the SSRF guard, the portal pages."""

import threading
from datetime import UTC, date, datetime, timedelta

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from billing.models import BillingAccount
from billing.services import invoice_close_month, spend_alerts_evaluate
from billing.services.dunning import invoice_paid, invoice_payment_failed
from metering.events import UsageCell
from metering.models import UsageHourly
from orgs.models import AuditEvent, OrgStatus, Role
from orgs.services import org_restore, org_suspend
from quotas.models import CapacityPool
from rollout.waves import wave_open
from tests.billing.conftest import usage_add
from tests.factories import (
    AllocationFactory,
    MembershipFactory,
    OrganizationFactory,
    PoolFactory,
    RolloutWaveFactory,
    UserFactory,
)
from tests.waitlist import approved_application
from tests.webhooks.conftest import Receiver, body_of
from webhooks.delivery import (
    MAX_ATTEMPTS,
    webhook_body,
    webhook_deliver,
    webhook_headers,
    webhooks_drain,
)
from webhooks.models import DeliveryStatus, EventType, WebhookDelivery, WebhookEvent
from webhooks.producers import daily_quota_thresholds_announce, waitlist_positions_announce
from webhooks.services import webhook_delivery_resend, webhook_endpoint_create

ALL = list(EventType.values)


def endpoint_for(org, receiver: Receiver, types=None):
    endpoint, secret = webhook_endpoint_create(org=org, url=receiver.url,
                                               event_types=types or ALL, description="",
                                               actor="test")
    receiver.secret = secret
    return endpoint


def _race(target, workers: int = 8) -> list:
    """Run `target` in `workers` threads released together; their results."""
    barrier, results, errors = threading.Barrier(workers), [], []

    def run():
        try:
            barrier.wait()
            results.append(target())
        except Exception as exc:  # surfaced below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    return results


@pytest.mark.django_db(transaction=True)
def test_a_suspension_reaches_the_receiver_signed(receiver):
    org = OrganizationFactory()
    endpoint = endpoint_for(org, receiver)
    assert endpoint.signing_secret() == receiver.secret and receiver.secret.startswith("whsec_")
    org_suspend(org=org, actor="test", reason="internal note")
    org_restore(org=org, actor="test", reason="ok")
    assert receiver.types() == ["organization.suspended", "organization.restored"]
    suspended = receiver.received[0]
    assert suspended["data"]["organization"] == {
        "id": org.pk, "name": org.name, "status": "suspended", "suspension_reason": "operator"}
    assert "internal note" not in str(suspended)
    assert suspended["id"].startswith("evt_") and not receiver.rejected
    assert WebhookDelivery.objects.filter(status=DeliveryStatus.DELIVERED).count() == 2


@pytest.mark.django_db
def test_forged_and_replayed_deliveries_are_detectable(receiver):
    org = OrganizationFactory()
    endpoint = endpoint_for(org, receiver)
    event = WebhookEvent.objects.create(org=org, type=EventType.ORG_ADMITTED, key="k",
                                        data={"x": 1})
    body = webhook_body(event)
    now = timezone.now()
    secret = endpoint.signing_secret()
    genuine = webhook_headers(secret=secret, event_id=event.event_id, body=body, at=now)
    assert Webhook(secret).verify(body, genuine) == body_of(event)
    forged = webhook_headers(secret="whsec_" + "A" * 44, event_id=event.event_id, body=body,
                             at=now)
    tampered = body.replace('"x":1', '"x":2')
    stale = webhook_headers(secret=secret, event_id=event.event_id, body=body,
                            at=now - timedelta(minutes=6))
    for headers, data in ((forged, body), (genuine, tampered), (stale, body)):
        with pytest.raises(WebhookVerificationError):
            Webhook(secret).verify(data, headers)
    # A replay inside the tolerance verifies; the id it repeats is what gives it away.
    assert receiver.handle(genuine, body.encode()) == 200
    assert receiver.handle(genuine, body.encode()) == 200
    assert receiver.rejected == ["replayed id"] and len(receiver.received) == 1


@pytest.mark.django_db(transaction=True)
def test_daily_quota_thresholds_fire_once_each_under_8_racing_workers(receiver):
    org, pool = OrganizationFactory(), PoolFactory()
    AllocationFactory(org=org, pool=pool, daily_tokens=1_000)
    endpoint_for(org, receiver, [EventType.DAILY_QUOTA_THRESHOLD])
    hour = timezone.now().replace(minute=0, second=0, microsecond=0)
    usage_add(org=org, pool=pool, hour=hour, i=300, o=300)  # 60 %
    cells = [UsageCell(org.pk, pool.pk, hour, 300, 300, 300, 300)]
    assert sum(_race(lambda: daily_quota_thresholds_announce(cells=cells))) == 1
    UsageHourly.objects.filter(org=org, hour=hour).update(input_tokens=700, output_tokens=400)
    assert sum(_race(lambda: daily_quota_thresholds_announce(cells=cells))) == 2
    assert sum(_race(lambda: daily_quota_thresholds_announce(cells=cells))) == 0
    thresholds = sorted(e["data"]["threshold_percent"] for e in receiver.received)
    assert thresholds == [50, 80, 100]
    assert WebhookEvent.objects.filter(org=org).count() == 3
    assert receiver.received[-1]["data"]["pool"]["service_tier"] == "priority"


@pytest.mark.django_db(transaction=True)
def test_spend_thresholds_fire_once_each_under_8_racing_workers(receiver, pool,
                                                                premium_price):
    org = OrganizationFactory()
    BillingAccount.objects.create(org=org, spend_cap_micros=10_000_000)  # $10
    endpoint_for(org, receiver, [EventType.SPEND_THRESHOLD])
    hour = timezone.now().replace(minute=0, second=0, microsecond=0)  # this month's
    usage_add(org=org, pool=pool, hour=hour, i=0, o=300_000)  # $9 list + $3 premium = $12
    _race(lambda: spend_alerts_evaluate(org=org))
    assert sorted(e["data"]["threshold_percent"] for e in receiver.received) == [50, 80, 100]
    assert receiver.received[0]["data"]["spend_cap"] == {"value": 10.0, "currency": "usd"}


@pytest.mark.django_db(transaction=True)
def test_a_receiver_that_is_down_gets_it_later():
    down = Receiver()  # not started: connections are refused
    org = OrganizationFactory()
    endpoint_for(org, down)
    org_suspend(org=org, actor="test", reason="")
    delivery = WebhookDelivery.objects.get()
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.PENDING, 1)
    assert delivery.next_attempt_at > timezone.now() and "Connect" in delivery.last_error
    assert webhooks_drain() == 0  # not due yet: no turn queued
    down.start()
    try:
        assert webhooks_drain(now=delivery.next_attempt_at) == 1  # one endpoint's turn
    finally:
        down.stop()
    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.DELIVERED
    assert down.types() == ["organization.suspended"]
    assert down.received[0]["id"] == delivery.event.event_id


@pytest.mark.django_db(transaction=True)
def test_dead_letters_are_listed_and_resent_from_the_portal(receiver):
    org = OrganizationFactory()
    owner = UserFactory()
    MembershipFactory(org=org, user=owner, role=Role.OWNER)
    endpoint = endpoint_for(org, receiver, [EventType.ORG_SUSPENDED])
    receiver.status = 500
    org_suspend(org=org, actor="test", reason="")
    delivery = WebhookDelivery.objects.get()
    later = timezone.now()
    while delivery.status == DeliveryStatus.PENDING:
        later = delivery.next_attempt_at
        webhook_deliver(delivery_id=delivery.pk, now=later)
        delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.last_status_code) == (
        DeliveryStatus.DEAD, MAX_ATTEMPTS, 500)
    browser = Client()
    browser.force_login(owner)
    listing = browser.get(f"/portal/o/{org.slug}/webhooks/")
    assert listing.status_code == 200 and endpoint.url in listing.content.decode()
    assert receiver.secret not in listing.content.decode()
    assert f"{receiver.secret[:10]}…" in listing.content.decode()  # the hint tells them apart
    page = browser.get(f"/portal/o/{org.slug}/webhooks/{endpoint.pk}/")
    assert "Resend" in page.content.decode()
    receiver.status = 200
    resent = browser.post(f"/portal/o/{org.slug}/webhooks/deliveries/{delivery.pk}/resend/")
    assert resent.status_code == 302
    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.DELIVERED
    assert receiver.types() == ["organization.suspended"]
    assert AuditEvent.objects.filter(action="webhook_delivery.resend", org=org).exists()
    with pytest.raises(Exception, match="dead letter"):
        webhook_delivery_resend(delivery=delivery, actor="test")


@pytest.mark.django_db
def test_endpoints_are_created_in_the_portal_with_the_secret_shown_once(two_orgs):
    a, b = two_orgs
    browser = Client()
    browser.force_login(a.owner)
    created = browser.post(f"/portal/o/{a.org.slug}/webhooks/", {
        "url": "https://hooks.example.com/sluice", "description": "alerts",
        "event_types": [EventType.INVOICE_ISSUED, EventType.SPEND_THRESHOLD]})
    assert created.status_code == 201
    secret = created.context["secret"]
    assert secret.startswith("whsec_") and secret in created.content.decode()
    assert secret not in browser.get(f"/portal/o/{a.org.slug}/webhooks/").content.decode()
    endpoint = a.org.webhook_endpoints.get()
    assert endpoint.event_types == sorted([EventType.INVOICE_ISSUED, EventType.SPEND_THRESHOLD])
    other = Client()
    other.force_login(b.owner)
    assert other.get(f"/portal/o/{a.org.slug}/webhooks/").status_code == 404
    assert other.get(f"/portal/o/{b.org.slug}/webhooks/{endpoint.pk}/").status_code == 404
    assert other.post(f"/portal/o/{b.org.slug}/webhooks/{endpoint.pk}/disable/"
                      ).status_code == 404


@pytest.mark.django_db
def test_production_refuses_http_and_private_addresses(settings, receiver):
    settings.WEBHOOKS_ALLOW_PRIVATE = False
    org = OrganizationFactory()
    with pytest.raises(Exception, match="https"):
        webhook_endpoint_create(org=org, url="http://hooks.example.com/", event_types=ALL,
                                description="", actor="test")
    endpoint, _ = webhook_endpoint_create(org=org, url=f"https://127.0.0.1:{receiver.port}/",
                                          event_types=ALL, description="", actor="test")
    event = WebhookEvent.objects.create(org=org, type=EventType.ORG_ADMITTED, key="k", data={})
    delivery = WebhookDelivery.objects.create(event=event, endpoint=endpoint)
    assert webhook_deliver(delivery_id=delivery.pk) == DeliveryStatus.PENDING
    delivery.refresh_from_db()
    assert "private or reserved" in delivery.last_error and not receiver.received


@pytest.mark.django_db(transaction=True)
def test_invoice_wave_and_waitlist_events(receiver, operator, pool, premium_price):
    org = OrganizationFactory()
    endpoint_for(org, receiver)
    usage_add(org=org, pool=pool, hour=datetime(2026, 10, 3, 9, tzinfo=UTC), i=1_000_000)
    invoice, _ = invoice_close_month(org=org, month=date(2026, 10, 1), actor=operator,
                                     now=datetime(2026, 11, 2, tzinfo=UTC))
    invoice_payment_failed(invoice=invoice)
    invoice_payment_failed(invoice=invoice)  # a retried charge failing again: told once
    invoice_paid(invoice=invoice)
    assert receiver.types() == ["invoice.issued", "invoice.payment_failed", "invoice.paid"]
    assert receiver.received[0]["data"]["invoice"]["total"] == {"value": 7.0, "currency": "usd"}

    queue_pool = PoolFactory(region="eu-west", capacity_tps=1_000)
    queued = [approved_application(operator, queue_pool, f"Queued {n}", use_case=use_case)
              for n, use_case in enumerate(["voice", "batch"])]
    late = Receiver()
    late.start()
    try:
        endpoint_for(queued[1].org, late)
        assert waitlist_positions_announce() == 1
        assert waitlist_positions_announce() == 0  # unchanged: nothing new
        wave = RolloutWaveFactory(pool=queue_pool, capacity_tps=1_000, guaranteed_tps=500,
                                  max_orgs=1)
        wave_open(wave=wave, actor=operator)  # admits the voice org, the batch org moves up
        assert waitlist_positions_announce() == 1
        assert [e["data"]["position"] for e in late.received] == [2, 1]
        wave2 = RolloutWaveFactory(pool=queue_pool, capacity_tps=1_000, guaranteed_tps=500,
                                   max_orgs=1)
        wave_open(wave=wave2, actor=operator)  # admits the batch org
        assert late.types()[-2:] == ["organization.admitted", "waitlist.wave_admitted"]
        assert late.received[-1]["data"]["wave"]["id"] == wave2.pk
    finally:
        late.stop()
    assert CapacityPool.objects.get(pk=queue_pool.pk).capacity_tps == 3_000
    queued[1].org.refresh_from_db()
    assert queued[1].org.status == OrgStatus.ACTIVE
