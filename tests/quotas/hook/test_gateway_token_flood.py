"""A flood of guessed `gw_` tokens costs no PostgreSQL query after the first, a bounded number
of Redis lookups per process, and a token created meanwhile works at once
(quotas/hook/gateway_token_misses.py). Asked of gateway_authenticate in the test's own thread,
which every transport of the hook calls for a token its process does not hold, so that the
queries it makes are the ones captured."""

import secrets

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from prometheus_client import REGISTRY

from quotas.hook import gateway_token_misses, gateway_tokens
from quotas.hook.gateway_tokens import (
    gateway_authenticate,
    gateway_token_cache_clear,
    gateway_token_create,
)
from quotas.limiter.schema import SHARED_KEY

pytestmark = pytest.mark.django_db(transaction=True)  # publishes run after real commits


@pytest.fixture
def known(limiter):
    """The Authorization header of a token the process holds."""
    gateway_token_cache_clear()
    _, plaintext = gateway_token_create(name="edge", actor="test")
    header = f"Bearer {plaintext}"
    assert gateway_authenticate(header) is not None  # the set is read
    return header


def guess() -> str:
    """A well-formed token nobody issued: a new digest every time."""
    return f"Bearer gw_{secrets.token_hex(6)}_{secrets.token_urlsafe(32)}"


def token_queries(captured) -> list[str]:
    return [q["sql"] for q in captured.captured_queries if "gatewaytoken" in q["sql"]]


def misses(answered_from: str) -> float:
    return REGISTRY.get_sample_value("sluice_gateway_token_misses_total",
                                     {"answered_from": answered_from}) or 0.0


def test_a_flood_of_guessed_tokens_costs_one_postgresql_query(known):
    with CaptureQueriesContext(connection) as captured:
        for _ in range(300):
            assert gateway_authenticate(guess()) is None
    assert len(token_queries(captured)) == 1  # the first guess reads the set; the rest none
    assert gateway_authenticate(known) is not None


def test_lookups_of_unknown_tokens_are_bounded_per_process(limiter, monkeypatch):
    monkeypatch.setattr(gateway_token_misses, "LOOKUP_BURST", 5)
    monkeypatch.setattr(gateway_token_misses, "LOOKUPS_PER_SECOND", 0.0)  # no refill
    gateway_token_cache_clear()
    _, plaintext = gateway_token_create(name="edge", actor="test")
    assert gateway_authenticate(f"Bearer {plaintext}") is not None
    looked_up = misses("redis") + misses("postgresql")
    from_memory = misses("memory")
    for _ in range(100):
        assert gateway_authenticate(guess()) is None
    assert misses("redis") + misses("postgresql") - looked_up == 5
    assert misses("memory") - from_memory == 95
    # Known tokens never spend the budget: they are in the set the process holds.
    assert gateway_authenticate(f"Bearer {plaintext}") is not None


def test_the_same_guess_is_refused_from_memory(known):
    stranger = guess()
    assert gateway_authenticate(stranger) is None
    looked_up = misses("redis") + misses("postgresql")
    with CaptureQueriesContext(connection) as captured:
        for _ in range(20):
            assert gateway_authenticate(stranger) is None
    assert token_queries(captured) == []
    assert misses("redis") + misses("postgresql") == looked_up  # no Redis lookup either


def test_a_token_created_during_a_flood_works_at_once(known):
    for _ in range(5):  # the PostgreSQL read of this window is spent, guesses are remembered
        assert gateway_authenticate(guess()) is None
    gateway_tokens._known.fresh_until = float("inf")  # the process never reads the set again
    token, plaintext = gateway_token_create(name="edge-new", actor="test")
    with CaptureQueriesContext(connection) as captured:
        identity = gateway_authenticate(f"Bearer {plaintext}")
    assert identity is not None and identity.token_id == token.pk  # found in Redis
    assert token_queries(captured) == []


def test_a_token_whose_publish_was_lost_is_found_in_postgresql(limiter):
    gateway_token_cache_clear()
    token, plaintext = gateway_token_create(name="edge", actor="test")
    limiter.hdel(SHARED_KEY.gateway_tokens, token.digest)  # as if its publish had failed
    assert gateway_authenticate(f"Bearer {plaintext}") is not None
    assert limiter.hexists(SHARED_KEY.gateway_tokens, token.digest)  # published again

