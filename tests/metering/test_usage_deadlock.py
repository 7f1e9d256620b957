"""Usage batches that share request ids, sent at once in different orders, must not deadlock:
every lock a batch takes (the request_id claims, the hourly rollups) is taken in one order."""

import random
from datetime import timedelta

import pytest
from django.db import connection

from metering.models import UsageEvent, UsageHourly
from quotas.hook.gateway_tokens import gateway_token_cache_clear, gateway_token_create
from quotas.hook.reservations import reservation_id_issue
from quotas.hook.routing import pool_routes_reload
from tests.hook import HookClient
from tests.quotas.conftest import tenant_create, threads_race

USAGE = "/api/gateway/v1/usage"
BATCHES, IDS, PER_BATCH = 50, 120, 60


@pytest.mark.django_db(transaction=True)
def test_overlapping_batches_in_random_orders_never_answer_5xx(limiter, limiter_clock,
                                                                patient_redis):
    tenants = [tenant_create(guaranteed_tps=1000, burst_tps=1000, daily_tokens=10**9,
                             max_concurrency=50) for _ in range(3)]
    pool_routes_reload()
    gateway_token_cache_clear()
    _, token = gateway_token_create(name="edge", actor="test")
    now = limiter_clock.now()
    events = {}
    for i in range(IDS):
        t, request_id = tenants[i % 3], f"r{i:04d}"
        # Several hours per tenant: each batch upserts many hourly rows, shared with others.
        start = now - timedelta(hours=i % 7, minutes=5)
        events[request_id] = {
            "request_id": request_id, "input_tokens": 10, "output_tokens": 30,
            "status": "completed", "started_at": start.isoformat(),
            "first_token_at": (start + timedelta(milliseconds=100)).isoformat(),
            "finished_at": (start + timedelta(milliseconds=600)).isoformat(),
            "reservation_id": reservation_id_issue(pool_id=t.pool.pk, org_id=t.org.pk,
                                                   api_key_id=t.key.pk,
                                                   request_id=request_id)}
    rng = random.Random(10)
    batches = [rng.sample(sorted(events), PER_BATCH) for _ in range(BATCHES)]
    statuses, recorded = [], []

    def send(i: int) -> None:
        client = HookClient(HTTP_AUTHORIZATION=f"Bearer {token}", raise_request_exception=False)
        try:
            r = client.post(USAGE, {"events": [events[x] for x in batches[i]]},
                            content_type="application/json")
            statuses.append(r.status_code)
            if r.status_code == 200:
                recorded.append(r.json()["recorded"])
        finally:
            connection.close()

    threads_race(BATCHES, send)
    assert [s for s in statuses if s >= 500] == []
    sent = set().union(*map(set, batches))
    assert sum(recorded) == len(sent) == UsageEvent.objects.count()
    assert sum(h.requests for h in UsageHourly.objects.all()) == len(sent)
