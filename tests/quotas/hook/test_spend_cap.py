"""Billing's spend cap enforced by the admission engine in real time: usage settled through the
real gateway hook raises the org's month counter by exactly what billing rates, and authorize
refuses with 403 `spend_cap_reached` once the cap is hit — also after Redis loses the counter."""

import threading
import time

import pytest
from django.db import connection

from billing.services.accounts import spend_cap_set
from billing.services.caps import month_to_date_micros
from quotas.hook.gateway_tokens import gateway_token_cache_clear, gateway_token_create
from quotas.hook.routing import pool_routes_reload
from quotas.limiter.clock import clock, month_stamp
from quotas.limiter.connection import limiter_client
from quotas.limiter.schema import pool_tag
from quotas.publish import limiter_sync_pool
from tests.hook import HookClient
from tests.metering.test_usage_ingest import AUTHORIZE, USAGE, authorize, event
from tests.quotas.conftest import tenant_create

# List price: 100 input + 300 output tokens = 100*5 + 300*30 = 9,500 micro-dollars a request.
COST_PER_REQUEST = 9_500
REPORTERS, REQUESTS_EACH = 4, 5


@pytest.fixture
def gateway(limiter):
    gateway_token_cache_clear()
    _, plaintext = gateway_token_create(name="edge-cap", actor="test")
    return HookClient(HTTP_AUTHORIZATION=f"Bearer {plaintext}")


def counter(t) -> int:
    key = f"{pool_tag(t.pool.pk)}:spend:{t.org.pk}:{month_stamp(clock.now())}"
    return int(limiter_client().get(key) or 0)


def authorize_within_cap(client, t, request_id: str) -> tuple[str, dict]:
    """Authorize a request that fits under the cap. Usage is priced into the month counter just
    before its settlement frees the money its reservation held, so for a moment another
    reporter's spend counts twice and a request that fits is refused: by design, a refusal too
    many and never a cap passed. Such a refusal is momentary; the next attempt is admitted."""
    for attempt in range(200):
        attempt_id = f"{request_id}-{attempt}"
        decision = authorize(client, t, attempt_id, input_tokens=100, max_output_tokens=300)
        if decision["allowed"] or decision["error"]["code"] != "spend_cap_reached":
            return attempt_id, decision
        time.sleep(0.005)
    return attempt_id, decision


@pytest.mark.django_db(transaction=True)
def test_concurrent_usage_reaches_the_cap_and_authorize_refuses(gateway):
    t = tenant_create(guaranteed_tps=100_000, burst_tps=100_000, daily_tokens=10**9,
                      max_concurrency=100)
    pool_routes_reload()
    total = REPORTERS * REQUESTS_EACH * COST_PER_REQUEST
    spend_cap_set(org=t.org, cap_micros=total, thresholds=[50, 80, 100], actor="test")
    limiter_sync_pool(pool_id=t.pool.pk)  # what the after-commit publish does
    barrier = threading.Barrier(REPORTERS)

    def report(worker: int) -> None:
        client = HookClient(headers=gateway.headers)
        barrier.wait()
        for n in range(REQUESTS_EACH):
            request_id, decision = authorize_within_cap(client, t, f"w{worker}-{n}")
            assert decision["allowed"], decision
            body = event(request_id, clock, reservation_id=decision["reservation_id"])
            assert client.post(USAGE, body, content_type="application/json").status_code == 200
        connection.close()

    threads = [threading.Thread(target=report, args=(w,)) for w in range(REPORTERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert counter(t) == total == month_to_date_micros(org=t.org, now=clock.now())
    refused = gateway.post(AUTHORIZE, {"request_id": "one-more", "api_key": t.plaintext,
                                       "model": t.pool.model, "input_tokens": 1,
                                       "max_output_tokens": 1},
                           content_type="application/json")
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "spend_cap_reached"

    # Redis loses the counter: the next sync rebuilds it from what billing has rated.
    limiter_client().flushdb()
    limiter_sync_pool(pool_id=t.pool.pk)
    assert counter(t) == total
    again = authorize(gateway, t, "after-flush", input_tokens=1, max_output_tokens=1)
    assert again["error"]["code"] == "spend_cap_reached"


@pytest.mark.django_db(transaction=True)
def test_raising_the_cap_lets_traffic_through_again(gateway):
    t = tenant_create(guaranteed_tps=100_000, burst_tps=100_000, daily_tokens=10**9,
                      max_concurrency=100)
    pool_routes_reload()
    spend_cap_set(org=t.org, cap_micros=COST_PER_REQUEST, thresholds=[100], actor="test")
    limiter_sync_pool(pool_id=t.pool.pk)
    first = authorize(gateway, t, "r1", input_tokens=100, max_output_tokens=300)
    gateway.post(USAGE, event("r1", clock, reservation_id=first["reservation_id"]),
                 content_type="application/json")
    assert authorize(gateway, t, "r2")["error"]["code"] == "spend_cap_reached"
    spend_cap_set(org=t.org, cap_micros=10 * COST_PER_REQUEST, thresholds=[100], actor="test")
    limiter_sync_pool(pool_id=t.pool.pk)
    assert authorize(gateway, t, "r3")["allowed"] is True
