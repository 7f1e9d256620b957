"""A flood of guessed `gw_` tokens costs no PostgreSQL query after the first, a bounded number
of Redis lookups per process, and a token created meanwhile works at once
(quotas/hook/gateway_token_misses.py)."""

import secrets

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from prometheus_client import REGISTRY

from quotas.hook import gateway_token_misses, gateway_tokens, routing
from quotas.hook.gateway_tokens import gateway_token_cache_clear, gateway_token_create
from quotas.limiter.schema import SHARED_KEY
from tests.quotas.conftest import tenant_create

pytestmark = pytest.mark.django_db(transaction=True)  # publishes run after real commits


@pytest.fixture
def tenant(limiter):
    t = tenant_create(guaranteed_tps=100, burst_tps=100, daily_tokens=10**6,
                      max_concurrency=100)
    routing.pool_routes_reload()
    return t


@pytest.fixture
def gateway(limiter):
    gateway_token_cache_clear()
    _, plaintext = gateway_token_create(name="edge", actor="test")
    return Client(HTTP_AUTHORIZATION=f"Bearer {plaintext}")


def ask(client, t, request_id):
    return client.post("/api/gateway/v1/authorize", {
        "request_id": request_id, "api_key": t.plaintext, "model": t.pool.model,
        "input_tokens": 9, "max_output_tokens": 1}, content_type="application/json")


def guess() -> Client:
    """A well-formed token nobody issued: a new digest every time."""
    return Client(HTTP_AUTHORIZATION=f"Bearer gw_{secrets.token_hex(6)}_"
                                     f"{secrets.token_urlsafe(32)}")


def token_queries(captured) -> list[str]:
    return [q["sql"] for q in captured.captured_queries if "gatewaytoken" in q["sql"]]


def misses(answered_from: str) -> float:
    return REGISTRY.get_sample_value("sluice_gateway_token_misses_total",
                                     {"answered_from": answered_from}) or 0.0


def test_a_flood_of_guessed_tokens_costs_one_postgresql_query(gateway, tenant):
    assert ask(gateway, tenant, "known").status_code == 200  # the set is read
    with CaptureQueriesContext(connection) as captured:
        for n in range(300):
            answer = ask(guess(), tenant, f"guess-{n}")
            assert answer.status_code == 401
            assert answer.json()["error"]["code"] == "invalid_gateway_token"
    assert len(token_queries(captured)) == 1  # the first guess reads the set; the rest none
    assert ask(gateway, tenant, "known-again").status_code == 200


def test_lookups_of_unknown_tokens_are_bounded_per_process(gateway, tenant, monkeypatch):
    monkeypatch.setattr(gateway_token_misses, "LOOKUP_BURST", 5)
    monkeypatch.setattr(gateway_token_misses, "LOOKUPS_PER_SECOND", 0.0)  # no refill
    gateway_token_cache_clear()
    assert ask(gateway, tenant, "known").status_code == 200
    looked_up = misses("redis") + misses("postgresql")
    from_memory = misses("memory")
    for n in range(100):
        assert ask(guess(), tenant, f"guess-{n}").status_code == 401
    assert misses("redis") + misses("postgresql") - looked_up == 5
    assert misses("memory") - from_memory == 95
    # Known tokens never spend the budget: they are in the set the process holds.
    assert ask(gateway, tenant, "known-again").status_code == 200


def test_the_same_guess_is_refused_from_memory(tenant, limiter):
    gateway_token_cache_clear()
    stranger = guess()
    assert ask(stranger, tenant, "r1").status_code == 401
    looked_up = misses("redis") + misses("postgresql")
    with CaptureQueriesContext(connection) as captured:
        for n in range(20):
            assert ask(stranger, tenant, f"again-{n}").status_code == 401
    assert token_queries(captured) == []
    assert misses("redis") + misses("postgresql") == looked_up  # no Redis lookup either


def test_a_token_created_during_a_flood_works_at_once(gateway, tenant):
    assert ask(gateway, tenant, "known").status_code == 200
    for n in range(5):  # the PostgreSQL read of this window is spent, guesses are remembered
        assert ask(guess(), tenant, f"guess-{n}").status_code == 401
    gateway_tokens._known.fresh_until = float("inf")  # the process never reads the set again
    _, plaintext = gateway_token_create(name="edge-new", actor="test")
    with CaptureQueriesContext(connection) as captured:
        answer = ask(Client(HTTP_AUTHORIZATION=f"Bearer {plaintext}"), tenant, "new")
    assert answer.status_code == 200  # found in Redis, where its creation published it
    assert token_queries(captured) == []


def test_a_token_whose_publish_was_lost_is_found_in_postgresql(tenant, limiter):
    gateway_token_cache_clear()
    token, plaintext = gateway_token_create(name="edge", actor="test")
    limiter.hdel(SHARED_KEY.gateway_tokens, token.digest)  # as if its publish had failed
    assert ask(Client(HTTP_AUTHORIZATION=f"Bearer {plaintext}"), tenant, "r1").status_code == 200
    assert limiter.hexists(SHARED_KEY.gateway_tokens, token.digest)  # published again
