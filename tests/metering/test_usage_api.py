"""GET /api/v1/orgs/<id>/usage/completions: OpenAI's shape, Sluice's extra numbers."""

from datetime import timedelta

import pytest
from rest_framework.test import APIClient

from metering.models import RefusalMinute
from metering.refusals import refusals_drain
from orgs.services import admin_key_create, api_key_create
from quotas.hook.gateway_tokens import gateway_token_cache_clear, gateway_token_create
from quotas.hook.routing import pool_routes_reload
from quotas.models import Tier
from quotas.publish import limiter_sync_pool
from tests.billing.conftest import usage_add
from tests.factories import PoolFactory
from tests.hook import HookClient
from tests.metering.test_usage_ingest import authorize, event
from tests.openai_schemas import openai_validate
from tests.quotas.conftest import tenant_create

pytestmark = pytest.mark.django_db(transaction=True)  # the served app's threads read rows
USAGE = "/api/gateway/v1/usage"


@pytest.fixture
def gateway(limiter):
    gateway_token_cache_clear()
    _, plaintext = gateway_token_create(name="edge-1", actor="test")
    return HookClient(HTTP_AUTHORIZATION=f"Bearer {plaintext}")


@pytest.fixture
def t(limiter):
    # Settling runs after the commit, which a test transaction never reaches: every request
    # keeps its concurrency slot.
    t = tenant_create(guaranteed_tps=1000, burst_tps=1000, daily_tokens=1_000_000,
                      max_concurrency=6)
    pool_routes_reload()
    _, t.admin_secret = admin_key_create(org=t.org, name="dash", actor="test")
    t.api = APIClient()
    t.api.credentials(HTTP_AUTHORIZATION=f"Bearer {t.admin_secret}")
    return t


def served(gateway, t, request_id, clock, **kwargs):
    """Authorize and report one request of `t`'s key."""
    rid = authorize(gateway, t, request_id)["reservation_id"]
    body = event(request_id, clock, reservation_id=rid, **kwargs)
    assert gateway.post(USAGE, body, content_type="application/json").json()["recorded"] == 1


def usage(t, **params):
    response = t.api.get(f"/api/v1/orgs/{t.org.pk}/usage/completions", params)
    assert response.status_code == 200, response.content
    body = response.json()
    openai_validate(body)
    return body


def test_minute_buckets_from_events_with_speeds_and_premium(gateway, t, limiter_clock):
    now = limiter_clock.now()
    served(gateway, t, "a", limiter_clock, ttft_ms=200, input_tokens=100, output_tokens=300)
    served(gateway, t, "b", limiter_clock, ttft_ms=400, input_tokens=50, output_tokens=100)
    start = int((now - timedelta(minutes=2)).timestamp())
    body = usage(t, start_time=start, end_time=int(now.timestamp()), bucket_width="1m")
    assert [len(b["results"]) for b in body["data"]] == [0, 1]
    assert body["data"][1]["start_time"] == int(now.timestamp()) - 60
    (result,) = body["data"][1]["results"]
    assert (result["input_tokens"], result["output_tokens"], result["num_model_requests"]) == (
        150, 400, 2)
    assert result["api_key_id"] is None and result["model"] is None
    assert result["sluice"]["ttft_ms"] == {"p50": 300.0, "p95": 390.0}
    # "b" decoded at 200 tokens/s, under the pool's floor of 300: not premium-eligible.
    assert result["sluice"]["premium_eligible_input_tokens"] == 100
    assert result["sluice"]["premium_eligible_output_tokens"] == 300
    assert result["sluice"]["output_tokens_per_second"]["p50"] == pytest.approx(400.0)
    assert body["has_more"] is False and body["next_page"] is None


def test_hour_and_day_buckets_come_from_the_rollups(gateway, t, limiter_clock):
    served(gateway, t, "a", limiter_clock, status="failed", ttft_ms=None)
    now = int(limiter_clock.now().timestamp())
    for width in ("1h", "1d"):
        body = usage(t, start_time=now - 7200, end_time=now, bucket_width=width)
        results = [r for b in body["data"] for r in b["results"]]
        assert [(r["input_tokens"], r["output_tokens"], r["num_model_requests"])
                for r in results] == [(100, 300, 1)], width
        assert results[0]["sluice"]["ttft_ms"] == {"p50": None, "p95": None}
        assert results[0]["sluice"]["premium_eligible_input_tokens"] == 0


def test_group_by_and_filters(gateway, t, limiter_clock):
    second, second_secret = api_key_create(org=t.org, name="second", actor="test")
    limiter_sync_pool(pool_id=t.pool.pk)
    served(gateway, t, "a", limiter_clock)
    t.plaintext = second_secret
    served(gateway, t, "b", limiter_clock, input_tokens=7)
    standard = PoolFactory(model="standard-model", tier=Tier.STANDARD)
    hour = limiter_clock.now().replace(minute=0, second=0) - timedelta(hours=1)
    usage_add(org=t.org, pool=standard, hour=hour, i=11, api_key=second)
    now = int(limiter_clock.now().timestamp())
    window = {"start_time": now - 7200, "end_time": now, "bucket_width": "1h"}
    by_key = usage(t, **window, group_by=["api_key_id", "service_tier", "model"])
    results = sorted((r["api_key_id"], r["service_tier"], r["model"], r["input_tokens"])
                     for b in by_key["data"] for r in b["results"])
    assert results == sorted([(str(t.key.pk), "priority", t.pool.model, 100),
                              (str(second.pk), "priority", t.pool.model, 7),
                              (str(second.pk), "default", "standard-model", 11)])
    by_tier = usage(t, **window, group_by=["service_tier"])
    assert sorted((r["service_tier"], r["input_tokens"]) for b in by_tier["data"]
                  for r in b["results"]) == [("default", 11), ("priority", 107)]
    only = usage(t, **window, api_key_ids=[second.pk], models=[t.pool.model])
    assert [r["input_tokens"] for b in only["data"] for r in b["results"]] == [7]
    nothing = usage(t, **window, models=["another-model"])
    assert [r for b in nothing["data"] for r in b["results"]] == []


def test_refusals_by_code_are_counted_and_drained(gateway, t, limiter_clock):
    for n in range(7):  # max_concurrency 6: the seventh is refused
        authorize(gateway, t, f"c{n}")
    assert RefusalMinute.objects.count() == 0
    refusals_drain(now=limiter_clock.now() + timedelta(minutes=3))
    refusals_drain(now=limiter_clock.now() + timedelta(minutes=3))  # idempotent
    now = int(limiter_clock.now().timestamp())
    body = usage(t, start_time=now - 60, end_time=now + 60, bucket_width="1m",
                 group_by=["api_key_id"])
    (result,) = [r for b in body["data"] for r in b["results"]]
    assert result["sluice"]["refusals"] == {"concurrency_exceeded": 1}
    assert result["api_key_id"] == str(t.key.pk) and result["num_model_requests"] == 0


def test_pages_follow_next_page_and_bad_input_is_a_400(t, limiter_clock):
    now = int(limiter_clock.now().timestamp()) // 3600 * 3600
    first = usage(t, start_time=now - 5 * 3600, end_time=now, bucket_width="1h", limit=2)
    assert len(first["data"]) == 2 and first["has_more"]
    starts = [b["start_time"] for b in first["data"]]
    page = first
    while page["has_more"]:
        page = usage(t, start_time=now - 5 * 3600, end_time=now, bucket_width="1h", limit=2,
                     page=page["next_page"])
        starts += [b["start_time"] for b in page["data"]]
    assert starts == list(range(now - 5 * 3600, now, 3600))
    url = f"/api/v1/orgs/{t.org.pk}/usage/completions"
    for params, field in [({"start_time": now, "bucket_width": "1h", "limit": 169}, "limit"),
                          ({"start_time": now, "end_time": now - 10}, "end_time"),
                          ({"start_time": now - 60, "end_time": now, "page": "page_12"},
                           "page"),
                          ({"start_time": now - 60, "end_time": now, "page": "page_x"}, "page"),
                          ({"start_time": now, "bucket_width": "5m"}, "bucket_width"),
                          ({"start_time": now, "group_by": "user_id"}, "group_by"),
                          ({}, "start_time")]:
        answer = t.api.get(url, params)
        assert answer.status_code == 400, (params, answer.content)
        assert field in answer.json()["error"]["fields"], params


def test_usage_costs_a_fixed_number_of_queries(gateway, t, limiter_clock,
                                               django_assert_num_queries):
    for n in range(5):
        served(gateway, t, f"q{n}", limiter_clock)
    now = int(limiter_clock.now().timestamp())
    url = f"/api/v1/orgs/{t.org.pk}/usage/completions"
    window = {"start_time": now - 3600, "end_time": now}
    t.api.get(url, window)  # the key's last_used_at, once a minute
    for width in ("1m", "1h", "1d"):
        # admin key (with its org), totals, speeds, refusals
        with django_assert_num_queries(4):
            answer = t.api.get(url, {**window, "bucket_width": width,
                                     "group_by": ["model", "api_key_id"]})
        assert answer.status_code == 200


def test_members_read_usage_too(t, limiter_clock):
    from tests.factories import MembershipFactory

    member = MembershipFactory(org=t.org, role="viewer").user
    client = APIClient()
    client.force_authenticate(member)
    now = int(limiter_clock.now().timestamp())
    assert client.get(f"/api/v1/orgs/{t.org.pk}/usage/completions",
                      {"start_time": now - 60, "end_time": now}).status_code == 200


def test_refusals_without_redis_or_org_are_not_counted(limiter, limiter_clock):
    from quotas.hook.refusals import refusal_count
    from quotas.limiter.schema import Decision

    refusal_count(decision=Decision(outcome="invalid_api_key"), pool_id=1, limiter="redis")
    refusal_count(decision=Decision(outcome="tps_exceeded", org_id=5), pool_id=1,
                  limiter="fail_open")
    refusal_count(decision=Decision(outcome="allowed", org_id=5), pool_id=1, limiter="redis")
    assert limiter.keys("sluice:refusals:*") == []
