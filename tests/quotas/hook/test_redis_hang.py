"""A hung Redis (a real redis-server stopped with SIGSTOP) and a slow one, through the served
application: after the first call left without a reply, the process answers by the pool's
policy at once (no call reaches Redis) until its probe finds Redis answering; a reply that is
slow but in time never opens the breaker. docs/faults.md, "Redis slow or hung"."""

import os
import signal
import time

import pytest

from quotas.hook import fail_open
from quotas.hook.gateway_tokens import gateway_token_cache_clear, gateway_token_create
from quotas.hook.routing import pool_routes_reload
from quotas.limiter import connection
from quotas.limiter.connection import limiter_reset
from tests.factories import PoolFactory
from tests.hook import HookClient
from tests.private_redis import PrivateRedis
from tests.quotas.conftest import tenant_create

pytestmark = pytest.mark.django_db(transaction=True)  # the served app's threads read rows


@pytest.fixture
def redis_server(tmp_path, settings, limiter, monkeypatch):
    """The engine on a Redis of the test's own, which it stops and resumes."""
    monkeypatch.setattr(fail_open, "HEARTBEAT_SECONDS", 3600)  # no script call but the test's
    server = PrivateRedis(tmp_path / "redis").start()
    settings.LIMITER_REDIS_URL = server.url
    settings.REDIS_REPLY_TIMEOUT_SECONDS = 0.5
    limiter_reset()
    fail_open.fail_open_reset()
    yield server
    os.kill(server.process.pid, signal.SIGCONT)  # never leave it stopped
    server.stop()
    limiter_reset()


@pytest.fixture
def gateway(redis_server) -> HookClient:
    gateway_token_cache_clear()
    return HookClient(gateway_token_create(name="edge", actor="test")[1])


def _tenant(policy="fail_closed"):
    t = tenant_create(pool=PoolFactory(limiter_failure_policy=policy), guaranteed_tps=10**6,
                      burst_tps=10**6, daily_tokens=10**9, max_concurrency=10**6)
    pool_routes_reload()
    return t


def ask(t, request_id) -> dict:
    return {"request_id": request_id, "api_key": t.plaintext, "model": t.pool.model,
            "input_tokens": 1, "max_output_tokens": 1}


def _script_calls(server) -> int:
    return server.client().info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)


def _breaker_closed() -> bool:
    for _ in range(1000):  # the probe runs in a thread of its own
        if not connection.hot_breaker_open():
            return True
        time.sleep(0.01)
    return False


def test_after_a_timeout_no_call_reaches_a_hung_redis_until_the_probe_answers(gateway,
                                                                              redis_server):
    closed, opened = _tenant("fail_closed"), _tenant("fail_open")
    assert gateway.authorize(ask(closed, "warm")).status_code == 200
    assert gateway.authorize(ask(opened, "warm-open")).status_code == 200
    before = _script_calls(redis_server)
    os.kill(redis_server.process.pid, signal.SIGSTOP)
    # The first call waits for its deadline, and opens the breaker.
    first = gateway.authorize(ask(closed, "first"))
    assert first.status_code == 503 and first.json()["error"]["code"] == "limiter_unavailable"
    assert connection.hot_breaker_open()
    # Then every call is answered by its pool's policy, none sent to Redis.
    for n in range(10):
        refused = gateway.authorize(ask(closed, f"open-{n}"))
        assert refused.json()["error"]["code"] == "limiter_unavailable"
        admitted = gateway.authorize(ask(opened, f"open-{n}"))
        assert admitted.status_code == 200 and admitted.json()["limiter"] == "fail_open"
    os.kill(redis_server.process.pid, signal.SIGCONT)
    probe = redis_server.client()
    probe.ping()  # Redis has read what was waiting in its sockets by the time it answers
    assert _script_calls(redis_server) == before + 1  # the first call's, written before
    # The probe finds Redis answering and closes the breaker; the next decision is Redis's.
    assert _breaker_closed()
    after = gateway.authorize(ask(closed, "after"))
    assert after.status_code == 200 and "limiter" not in after.json()
    assert _script_calls(redis_server) == before + 2


def test_a_reply_slow_but_in_time_never_opens_the_breaker(gateway, redis_server):
    t = _tenant()
    assert gateway.authorize(ask(t, "warm")).status_code == 200
    # Redis busy for 150 ms (CLIENT PAUSE: every command waits, then runs), the reply timeout
    # 500 ms: decisions wait, and are Redis's.
    redis_server.client().client_pause(150)
    answers = gateway.many("/api/gateway/v1/authorize", [ask(t, f"slow-{n}") for n in range(5)])
    assert [a.status_code for a in answers] == [200] * 5
    assert not connection.hot_breaker_open()
