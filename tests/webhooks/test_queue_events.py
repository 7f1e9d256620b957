"""queue.requests_refused: the admission queue refused an org's requests (queue_timeout,
queue_full). Counted by the hook like every refusal, drained by beat each minute, announced in
the drain's transaction once per org, pool and minute, delivered through the outbox."""

import time
from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client

from metering.refusals import refusals_drain
from quotas.hook.refusals import HASH_KEY, MINUTES_KEY, refusal_count
from quotas.limiter.clock import clock
from quotas.limiter.connection import limiter_client, limiter_reset
from quotas.limiter.schema import Decision
from tests.admission.test_hook_queue import body, queued_tenant, slot_hold
from tests.hook import hook_client
from tests.quotas.conftest import tenant_create
from tests.webhooks.test_webhooks import endpoint_for
from webhooks.models import EventType, WebhookEvent

pytestmark = pytest.mark.django_db(transaction=True)
QUEUE = [EventType.QUEUE_REFUSED]


@pytest.fixture
def hook(redis_client):
    with hook_client("edge-queue-events") as client:
        yield client


def drained_minutes() -> int:
    return refusals_drain(now=clock.now() + timedelta(minutes=3))


def test_requests_the_queue_refused_reach_the_org_once_a_minute_with_counts(hook, receiver):
    """Two requests wait for the org's one slot, which is never freed: each is refused
    queue_timeout at its budget's end. One event for the minute, however many requests, and
    none more when the minute is drained again."""
    t = queued_tenant(max_concurrency=1)
    endpoint_for(t.org, receiver, types=QUEUE)
    slot_hold(t, "held")
    answers = [hook.authorize(body(t, queue_threshold_ms=300)) for _ in range(2)]
    assert [a.json()["error"]["code"] for a in answers] == ["queue_timeout"] * 2
    for _ in range(500):  # the hook counts refusals off the decision's path
        if counted(t, "queue_timeout") == 2:
            break
        time.sleep(0.01)
    drained_minutes()
    drained_minutes()  # twice: nothing new
    assert receiver.types() == ["queue.requests_refused"]
    data = receiver.received[0]["data"]
    assert (data["refused"], data["queue_timeout"], data["queue_full"]) == (2, 2, 0)
    assert data["pool"]["id"] == t.pool.pk and data["pool"]["model"] == t.pool.model


def counted(t, code: str) -> int:
    """The org's refusals with `code` the hook has counted in Redis, not yet drained."""
    client = limiter_client()
    return sum(int(count) for minute in client.zrange(MINUTES_KEY, 0, -1)
               for field, count in client.hgetall(HASH_KEY.format(minute=minute)).items()
               if field.startswith(f"{t.org.pk}:") and field.endswith(f":{code}"))


def test_only_the_queues_refusals_of_subscribed_orgs_are_announced_a_minute_each(receiver,
                                                                               redis_client):
    limiter_reset()
    subscribed = tenant_create(guaranteed_tps=100, burst_tps=100)
    other = tenant_create(guaranteed_tps=100, burst_tps=100, pool=subscribed.pool)
    endpoint_for(subscribed.org, receiver, types=QUEUE)
    minute = datetime.now(UTC).replace(second=30, microsecond=0)

    def refused(t, code, at):
        clock.freeze(at)
        try:
            refusal_count(decision=Decision(code, org_id=t.org.pk, api_key_id=t.key.pk),
                          pool_id=t.pool.pk, limiter="redis")
        finally:
            clock.unfreeze()

    for at in (minute, minute + timedelta(minutes=1)):
        refused(subscribed, "queue_full", at)
        refused(subscribed, "queue_timeout", at)
        refused(subscribed, "tps_exceeded", at)  # not the queue's
        refused(other, "queue_full", at)  # its org subscribed to nothing
    refused(subscribed, "tps_exceeded", minute + timedelta(minutes=2))
    refusals_drain(now=minute + timedelta(minutes=6))
    assert receiver.types() == ["queue.requests_refused"] * 2
    assert [(e["data"]["queue_full"], e["data"]["queue_timeout"]) for e in receiver.received] \
        == [(1, 1), (1, 1)]
    assert WebhookEvent.objects.filter(org=other.org).count() == 0


@pytest.mark.django_db
def test_an_org_subscribes_to_the_queues_refusals_in_the_portal(two_orgs):
    a, _ = two_orgs
    browser = Client()
    browser.force_login(a.owner)
    form = browser.get(f"/portal/o/{a.org.slug}/webhooks/").content.decode()
    assert f'value="{EventType.QUEUE_REFUSED}"' in form
    assert EventType.QUEUE_REFUSED.label in form
    created = browser.post(f"/portal/o/{a.org.slug}/webhooks/", {
        "url": "https://hooks.example.com/sluice", "description": "queue",
        "event_types": [EventType.QUEUE_REFUSED]})
    assert created.status_code == 201
    assert a.org.webhook_endpoints.get().event_types == [EventType.QUEUE_REFUSED]
