"""Redis stopped for real (a private redis-server, terminated mid-test): each pool's failure
policy applies, and usage is still recorded in PostgreSQL."""

from datetime import timedelta

import pytest

from metering.models import UsageEvent
from quotas.hook.fail_open import fail_open_reset
from quotas.hook.gateway_tokens import gateway_token_cache_clear, gateway_token_create
from quotas.hook.routing import pool_routes_reload
from quotas.limiter.connection import limiter_reset
from quotas.models import LimiterFailurePolicy
from tests.factories import PoolFactory
from tests.hook import HookClient
from tests.private_redis import PrivateRedis
from tests.quotas.conftest import tenant_create

pytestmark = pytest.mark.django_db(transaction=True)  # the served app's threads read rows


@pytest.fixture
def private_redis(tmp_path, settings, limiter_clock):
    server = PrivateRedis(tmp_path).start()
    settings.REDIS_URL = server.url
    limiter_reset()
    fail_open_reset()
    yield server
    server.stop()
    limiter_reset()


@pytest.fixture
def gateway(private_redis):
    gateway_token_cache_clear()
    _, plaintext = gateway_token_create(name="edge", actor="test")
    return HookClient(HTTP_AUTHORIZATION=f"Bearer {plaintext}")


def ask(client, t, request_id, *, cost=100, api_key=None):
    return client.post("/api/gateway/v1/authorize", {
        "request_id": request_id, "api_key": api_key or t.plaintext, "model": t.pool.model,
        "input_tokens": cost - 1, "max_output_tokens": 1}, content_type="application/json")


def tenant_in(policy):
    t = tenant_create(pool=PoolFactory(limiter_failure_policy=policy), guaranteed_tps=100,
                      burst_tps=200, daily_tokens=10**6, max_concurrency=3)
    pool_routes_reload()
    return t


def test_fail_closed_answers_503(gateway, private_redis):
    t = tenant_in(LimiterFailurePolicy.FAIL_CLOSED)
    assert ask(gateway, t, "r1").status_code == 200
    private_redis.stop()
    r = ask(gateway, t, "r2")
    assert r.status_code == 503 and r.json()["error"]["code"] == "limiter_unavailable"


def test_fail_open_admits_under_a_local_limit_at_the_guaranteed_rate(gateway, private_redis):
    t = tenant_in(LimiterFailurePolicy.FAIL_OPEN)
    assert ask(gateway, t, "seen").status_code == 200  # Redis up: a fleet of one process
    private_redis.stop()
    # Local bucket: 100 TPS x 10 s (the whole guarantee: this process is the whole fleet);
    # concurrency (3) is not enforced without Redis.
    for i in range(10):
        r = ask(gateway, t, f"r{i}")
        assert r.status_code == 200 and r.json()["limiter"] == "fail_open"
        assert r.json()["reservation_id"].startswith(f"rsv_{t.pool.pk}_{t.org.pk}_")
    refused = ask(gateway, t, "r10")
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "tps_exceeded"
    assert ask(gateway, t, "r11", api_key="sk_000000000000_nope").status_code == 401


def test_fail_open_still_refuses_suspended_orgs(gateway, private_redis):
    from orgs.services.lifecycle import org_suspend

    t = tenant_in(LimiterFailurePolicy.FAIL_OPEN)
    private_redis.stop()
    org_suspend(org=t.org, actor="test")  # its publish fails: Redis is down
    r = ask(gateway, t, "r1")
    assert r.status_code == 403 and r.json()["error"]["code"] == "org_not_active"


def test_usage_is_recorded_while_redis_is_down(gateway, private_redis, limiter_clock):
    t = tenant_in(LimiterFailurePolicy.FAIL_OPEN)
    private_redis.stop()
    granted = ask(gateway, t, "r1").json()
    start = limiter_clock.now() - timedelta(seconds=2)
    event = {"input_tokens": 99, "output_tokens": 1, "status": "completed",
             "started_at": start.isoformat(), "first_token_at": start.isoformat(),
             "finished_at": (start + timedelta(seconds=1)).isoformat()}
    body = {"events": [{**event, "request_id": "r1",
                        "reservation_id": granted["reservation_id"]},
                       {**event, "request_id": "r2"}]}
    results = gateway.post("/api/gateway/v1/usage", body,
                           content_type="application/json").json()["results"]
    assert results[0] == {"request_id": "r1", "result": "recorded"}
    assert results[1]["error"]["code"] == "attribution_unavailable"
    assert UsageEvent.objects.get().unreserved is True
