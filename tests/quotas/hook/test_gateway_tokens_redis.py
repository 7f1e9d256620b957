"""Gateway tokens are read from Redis, not PostgreSQL: authorize keeps answering while
PostgreSQL cannot be reached, and a revocation still takes effect within a second."""

import time

import pytest
from django.core.management import call_command
from django.db import connection

from quotas.hook import gateway_tokens, routing
from quotas.hook.gateway_tokens import (
    REFRESH_SECONDS,
    gateway_authenticate,
    gateway_token_cache_clear,
    gateway_token_create,
    gateway_token_revoke,
)
from quotas.limiter.connection import limiter_client
from quotas.limiter.schema import SHARED_KEY
from quotas.models import GatewayToken
from tests.hook import HookClient
from tests.private_redis import free_port
from tests.quotas.conftest import tenant_create

pytestmark = pytest.mark.django_db(transaction=True)  # publishes run after real commits


@pytest.fixture
def gateway(limiter):
    gateway_token_cache_clear()
    token, plaintext = gateway_token_create(name="edge", actor="test")
    client = HookClient(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
    client.token = token
    return client


@pytest.fixture
def tenant(limiter):
    t = tenant_create(guaranteed_tps=100, burst_tps=100, daily_tokens=10**6,
                      max_concurrency=100)
    routing.pool_routes_reload()
    return t


def ask(client, t, request_id):
    return client.post("/api/gateway/v1/authorize", {
        "request_id": request_id, "api_key": t.plaintext, "model": t.pool.model,
        "input_tokens": 9, "max_output_tokens": 1}, content_type="application/json")


@pytest.fixture
def postgresql_unreachable():
    """Break this process's PostgreSQL connection: every query raises OperationalError."""
    def cut():
        connection.close()
        connection.settings_dict["PORT"] = free_port()  # nothing listens there
    port = connection.settings_dict["PORT"]
    yield cut
    connection.close()
    connection.settings_dict["PORT"] = port


def test_authorize_keeps_answering_while_postgresql_is_unreachable(gateway, tenant,
                                                                   postgresql_unreachable):
    assert ask(gateway, tenant, "before").status_code == 200
    postgresql_unreachable()
    gateway_token_cache_clear()  # the token set is read again (from Redis)
    routing._routes.loaded_at = float("-inf")  # the pool table is due for a reload
    for n in range(5):
        answer = ask(gateway, tenant, f"during-{n}")
        assert answer.status_code == 200 and answer.json()["allowed"] is True


def test_a_revoked_token_is_refused_within_a_second(gateway, tenant):
    assert ask(gateway, tenant, "r1").status_code == 200
    gateway_token_revoke(token=gateway.token, actor="test")
    time.sleep(max(REFRESH_SECONDS, 1.0))  # the promise: within a second, without clearing
    # The first call after that finds the set stale and has it read again in the background
    # (it is answered from the set in force meanwhile); the calls after it, from the new one.
    for n in range(100):
        answer = ask(gateway, tenant, f"r{n + 2}")
        if answer.status_code != 200:
            break
        time.sleep(0.01)  # the refresh runs in a thread
    assert answer.status_code == 401
    assert answer.json()["error"]["code"] == "invalid_gateway_token"


def test_tokens_come_back_after_redis_lost_them(gateway, tenant, limiter):
    limiter.flushdb()
    gateway_token_cache_clear()
    assert ask(gateway, tenant, "r1").status_code == 200
    assert limiter.hexists(SHARED_KEY.gateway_tokens, gateway.token.digest)


def test_unknown_tokens_are_refused_and_remembered(tenant, limiter, django_assert_num_queries):
    gateway_token_cache_clear()
    stranger = HookClient(HTTP_AUTHORIZATION="Bearer gw_000000000000_guess")
    assert ask(stranger, tenant, "r1").status_code == 401
    # The served hook looks an unknown token up in a thread (gateway_authenticate): asked in
    # this thread, where the query count sees it, a guess costs no query the second time.
    header = "Bearer gw_000000000001_guess"
    assert gateway_authenticate(header) is None
    with django_assert_num_queries(0):
        assert gateway_authenticate(header) is None


def test_last_use_reaches_postgresql_through_limiter_sync(gateway, tenant):
    assert ask(gateway, tenant, "r1").status_code == 200
    gateway_tokens._known.fresh_until = float("-inf")  # due: the next refresh records the use
    assert ask(gateway, tenant, "r2").status_code == 200
    for _ in range(500):  # the refresh runs in the background
        if limiter_client().hexists(SHARED_KEY.gateway_tokens_used, str(gateway.token.pk)):
            break
        time.sleep(0.01)
    assert GatewayToken.objects.get(pk=gateway.token.pk).last_used_at is None
    call_command("limiter_sync")
    assert GatewayToken.objects.get(pk=gateway.token.pk).last_used_at is not None
