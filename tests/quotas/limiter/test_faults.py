"""Redis failing in ways other than "stopped", for real (private redis-servers): a read-only
replica, out of memory, a slow reply, a silent server, and a pool rebuilt by fifty callers at
once. Each pool's failure policy answers, never a 500; a slow reply is not an outage."""

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.db import connection

from metering.models import UsageEvent
from quotas import publish
from quotas.hook.fail_open import fail_open_reset
from quotas.hook.gateway_tokens import gateway_token_cache_clear, gateway_token_create
from quotas.hook.routing import pool_routes_reload
from quotas.limiter.connection import limiter_reset
from quotas.limiter.schema import KEY, pool_key
from quotas.models import LimiterFailurePolicy
from tests.aio import limiter_authorize
from tests.factories import PoolFactory
from tests.hook import HookClient
from tests.private_redis import PrivateRedis
from tests.quotas.conftest import tenant_create

pytestmark = pytest.mark.django_db(transaction=True)  # the served app's threads read rows
POLICIES = [(LimiterFailurePolicy.FAIL_CLOSED, 503), (LimiterFailurePolicy.FAIL_OPEN, 200)]


@pytest.fixture
def server(tmp_path, settings, limiter_clock):
    """A private Redis the engine uses; stopped afterwards."""
    started = PrivateRedis(tmp_path / "main").start()
    settings.REDIS_URL = started.url
    limiter_reset()
    fail_open_reset()
    gateway_token_cache_clear()
    yield started
    started.stop()
    limiter_reset()


@pytest.fixture
def another_server(tmp_path):
    started = PrivateRedis(tmp_path / "another").start()
    yield started
    started.stop()


@pytest.fixture
def gateway(server):
    _, plaintext = gateway_token_create(name="edge", actor="test")
    return HookClient(HTTP_AUTHORIZATION=f"Bearer {plaintext}")


def tenant_in(policy=LimiterFailurePolicy.FAIL_CLOSED):
    t = tenant_create(pool=PoolFactory(limiter_failure_policy=policy), guaranteed_tps=100,
                      burst_tps=200, daily_tokens=10**6, max_concurrency=50)
    pool_routes_reload()
    return t


def ask(client, t, request_id):
    return client.post("/api/gateway/v1/authorize", {
        "request_id": request_id, "api_key": t.plaintext, "model": t.pool.model,
        "input_tokens": 9, "max_output_tokens": 1}, content_type="application/json")


def assert_policy_answered(answer, policy, status):
    assert answer.status_code == status
    if policy == LimiterFailurePolicy.FAIL_CLOSED:
        assert answer.json()["error"]["code"] == "limiter_unavailable"
    else:
        assert answer.json()["limiter"] == "fail_open"


# Item 5: every Redis failure goes by the policy, error replies included.

@pytest.mark.parametrize("policy, status", POLICIES)
def test_a_read_only_replica_answers_by_the_pools_policy(gateway, server, another_server,
                                                        policy, status):
    t = tenant_in(policy)
    assert ask(gateway, t, "before").status_code == 200
    # A failover: a replica with all the data is promoted, and the engine's Redis, demoted,
    # now replicates it (same data, read-only).
    another_server.replica_of(server)
    another_server.client().replicaof("NO", "ONE")
    server.replica_of(another_server)
    assert server.client().exists(pool_key(t.pool.pk, KEY.synced))
    answer = ask(gateway, t, "after")
    assert_policy_answered(answer, policy, status)


@pytest.mark.parametrize("policy, status", POLICIES)
def test_an_out_of_memory_redis_answers_by_the_pools_policy(gateway, server, policy, status):
    t = tenant_in(policy)
    assert ask(gateway, t, "before").status_code == 200
    server.client().config_set("maxmemory-policy", "noeviction")
    server.client().config_set("maxmemory", 1)
    answer = ask(gateway, t, "after")
    assert_policy_answered(answer, policy, status)


def test_usage_is_recorded_when_redis_cannot_write(gateway, server, limiter_clock):
    t = tenant_in()
    granted = ask(gateway, t, "r1").json()
    server.client().config_set("maxmemory-policy", "noeviction")
    server.client().config_set("maxmemory", 1)
    start = limiter_clock.now() - timedelta(seconds=2)
    event = {"request_id": "r1", "reservation_id": granted["reservation_id"],
             "input_tokens": 9, "output_tokens": 1, "status": "completed",
             "started_at": start.isoformat(), "first_token_at": start.isoformat(),
             "finished_at": (start + timedelta(seconds=1)).isoformat()}
    answer = gateway.post("/api/gateway/v1/usage", event, content_type="application/json")
    assert answer.status_code == 200 and answer.json()["recorded"] == 1
    assert UsageEvent.objects.filter(request_id="r1").exists()


# Item 8: "Redis is down" is not "one slow reply".

def test_a_reply_slower_than_the_connect_timeout_is_waited_for(gateway, server, settings):
    settings.REDIS_TIMEOUT_SECONDS = 0.05
    settings.REDIS_REPLY_TIMEOUT_SECONDS = 5.0
    t = tenant_in()
    assert ask(gateway, t, "warm").status_code == 200  # the connection is open
    server.client().client_pause(300)  # every command waits 0.3 s: slow, not down
    answer = ask(gateway, t, "slow")
    assert answer.status_code == 200 and "limiter" not in answer.json()


def test_a_redis_silent_past_the_reply_timeout_answers_by_the_policy(gateway, server,
                                                                      settings):
    settings.REDIS_REPLY_TIMEOUT_SECONDS = 0.2
    t = tenant_in()
    assert ask(gateway, t, "warm").status_code == 200
    server.client().client_pause(3000)
    assert_policy_answered(ask(gateway, t, "silent"), LimiterFailurePolicy.FAIL_CLOSED, 503)


# Item 6: one rebuild per pool at a time.

@pytest.fixture
def rebuilds(monkeypatch) -> list:
    """Pools rebuilt from PostgreSQL, once per rebuild."""
    calls = []
    publish_ = publish._publish

    def counted(*, org_ids=None, pool_ids=None):
        if pool_ids is not None:
            calls.append(tuple(pool_ids))
        return publish_(org_ids=org_ids, pool_ids=pool_ids)

    monkeypatch.setattr(publish, "_publish", counted)
    return calls


@pytest.mark.django_db(transaction=True)
def test_fifty_concurrent_authorizes_after_a_flush_rebuild_the_pool_once(limiter, rebuilds,
                                                                        monkeypatch):
    # The count is the point here, not the wait.
    monkeypatch.setattr(publish, "REBUILD_WAIT_SECONDS", 60, raising=False)
    t = tenant_in()
    limiter.flushdb()
    rebuilds.clear()
    start = threading.Barrier(50)

    def one(n):
        start.wait()
        try:
            return limiter_authorize(pool_id=t.pool.pk, api_key=t.plaintext,
                                     request_id=f"r{n}", input_tokens=9, max_output_tokens=1)
        finally:
            connection.close()

    with ThreadPoolExecutor(50) as pool:
        decisions = list(pool.map(one, range(50)))
    assert rebuilds == [(t.pool.pk,)]
    assert [d.outcome for d in decisions] == ["allowed"] * 50


def test_a_rebuild_held_elsewhere_past_the_wait_answers_by_the_policy(
        gateway, server, rebuilds, monkeypatch):
    monkeypatch.setattr(publish, "REBUILD_WAIT_SECONDS", 0.05, raising=False)
    t = tenant_in()
    redis = server.client()
    redis.flushdb()
    redis.set(pool_key(t.pool.pk, KEY.rebuild), "another-process", px=60_000)
    rebuilds.clear()
    assert_policy_answered(ask(gateway, t, "r1"), LimiterFailurePolicy.FAIL_CLOSED, 503)
    assert rebuilds == []
    redis.delete(pool_key(t.pool.pk, KEY.rebuild))  # the other process died: its TTL ran out
    assert ask(gateway, t, "r2").status_code == 200
    assert rebuilds == [(t.pool.pk,)]


def test_a_restarted_redis_is_answered_on_the_first_call_of_a_kept_connection(server):
    """Every thread keeps its own connection (connection.py). After Redis restarts, the first
    call on one is written to a socket the old server closed: it is sent once more on a new
    connection (every script is idempotent by request id) instead of failing that thread's next
    decision, or its next usage batch's settlement."""
    t = tenant_in()
    assert limiter_authorize(pool_id=t.pool.pk, api_key=t.plaintext, request_id="before",
                             input_tokens=1, max_output_tokens=1).allowed
    server.stop()
    server.start()  # the same port, empty: the pool is rebuilt from PostgreSQL
    after = limiter_authorize(pool_id=t.pool.pk, api_key=t.plaintext, request_id="after",
                              input_tokens=1, max_output_tokens=1)
    assert after.allowed, after
