"""Refusals tell gateways (and the OpenAI SDK behind them) whether retrying
the same request can help soon: `error.retryable` and the `x-should-retry` header."""

import re
from pathlib import Path

import pytest

from quotas.hook.gateway_tokens import gateway_token_cache_clear, gateway_token_create
from quotas.hook.routing import pool_routes_reload
from quotas.limiter.state import BUCKET_SECONDS
from tests.hook import HookClient
from tests.quotas.conftest import tenant_create

pytestmark = pytest.mark.django_db(transaction=True)  # the served app's threads read rows
URL = "/api/gateway/v1/authorize"
HOOK_DOCS = Path(__file__).resolve().parents[3] / "docs" / "hook.md"


@pytest.fixture
def gateway(limiter):
    gateway_token_cache_clear()
    _, plaintext = gateway_token_create(name="edge-hints", actor="test")
    return HookClient(HTTP_AUTHORIZATION=f"Bearer {plaintext}")


def ask(client, t, request_id, *, input_tokens=10, max_output_tokens=10, **extra):
    return client.post(URL, {"request_id": request_id, "api_key": t.plaintext,
                             "model": t.pool.model, "input_tokens": input_tokens,
                             "max_output_tokens": max_output_tokens, **extra},
                       content_type="application/json")


def test_daily_quota_exhausted_waits_for_midnight_and_says_do_not_retry(gateway):
    t = tenant_create(guaranteed_tps=1000, burst_tps=1000, daily_tokens=100,
                      max_concurrency=10)
    pool_routes_reload()
    assert ask(gateway, t, "r1", input_tokens=50, max_output_tokens=50).status_code == 200
    r = ask(gateway, t, "r2")
    assert r.status_code == 429
    error, headers = r.json()["error"], r.json()["headers"]
    assert error["code"] == "daily_quota_exhausted"
    # The limiter's clock is frozen at noon UTC: twelve hours to the next UTC midnight.
    assert error["retry_after_ms"] == 12 * 3600 * 1000
    assert error["retryable"] is False
    assert headers["x-should-retry"] == "false"
    assert headers["retry-after-ms"] == str(12 * 3600 * 1000)


def test_a_refusal_that_waiting_fixes_says_retry(gateway):
    t = tenant_create(guaranteed_tps=1000, burst_tps=1000, daily_tokens=10**6,
                      max_concurrency=1)
    pool_routes_reload()
    assert ask(gateway, t, "r1").status_code == 200
    r = ask(gateway, t, "r2")
    body = r.json()
    assert body["error"]["code"] == "concurrency_exceeded"
    assert body["error"]["retryable"] is True and body["headers"]["x-should-retry"] == "true"


@pytest.mark.parametrize("change, code, status", [
    ({"api_key": "sk_000000000000_wrong"}, "invalid_api_key", 401),
    ({"model": "no-such-model"}, "unknown_model", 404),
])
def test_refusals_that_retrying_cannot_fix_say_so(gateway, change, code, status):
    t = tenant_create()
    pool_routes_reload()
    r = ask(gateway, t, "r1", **change)
    assert r.status_code == status
    assert r.json()["error"]["code"] == code
    assert r.json()["error"]["retryable"] is False
    assert r.json()["headers"]["x-should-retry"] == "false"


def test_malformed_input_is_not_retryable(gateway):
    t = tenant_create()
    pool_routes_reload()
    r = ask(gateway, t, "r1", input_tokens=-1)
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "invalid_input"
    assert r.json()["error"]["retryable"] is False


def test_the_token_bucket_limit_is_the_burst_ceiling_times_the_bucket_seconds(gateway):
    t = tenant_create(guaranteed_tps=100, burst_tps=300, daily_tokens=10**6,
                      max_concurrency=10)
    pool_routes_reload()
    headers = ask(gateway, t, "r1").json()["headers"]
    assert headers["x-ratelimit-limit-tokens"] == str(300 * BUCKET_SECONDS)
    # docs/hook.md says the same: burst_tps (the ceiling, guarantee included) x 10 s.
    readme = HOOK_DOCS.read_text()
    assert "(guaranteed + burst) TPS x 10 s" not in readme
    assert re.search(r"x-ratelimit-limit-tokens`[^.]*`burst_tps` x 10 s", readme.replace("\n", " "))
