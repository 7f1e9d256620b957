"""The hook's contract grows by addition only: a gateway that sends the first contract's bodies
(no service_tier, a max_output_tokens, no cached_input_tokens) to a pool that meters input with
output gets that contract's answers, field for field; the newer fields come beside them."""

import pytest

from quotas.hook.gateway_tokens import gateway_token_cache_clear, gateway_token_create
from quotas.hook.routing import pool_routes_reload
from tests.hook import HookClient
from tests.metering.test_usage_ingest import event
from tests.quotas.conftest import tenant_create

pytestmark = pytest.mark.django_db(transaction=True)  # the served app's threads read rows
AUTHORIZE, USAGE = "/api/gateway/v1/authorize", "/api/gateway/v1/usage"
V1_HEADERS = {f"x-ratelimit-{kind}-{what}" for what in ("tokens", "tokens-day", "requests")
              for kind in ("limit", "remaining", "reset")}


@pytest.fixture
def gateway(limiter):
    gateway_token_cache_clear()
    _, token = gateway_token_create(name="edge-v1", actor="test")
    return HookClient(HTTP_AUTHORIZATION=f"Bearer {token}")


@pytest.fixture
def t(limiter):
    t = tenant_create(guaranteed_tps=100, burst_tps=100, daily_tokens=100_000,
                      max_concurrency=2)
    pool_routes_reload()
    return t


def v1_body(t, request_id, **extra):
    return {"request_id": request_id, "api_key": t.plaintext, "model": t.pool.model,
            "input_tokens": 30, "max_output_tokens": 70, **extra}


def post(client, url, body):
    return client.post(url, body, content_type="application/json")


def test_an_allowed_v1_request_gets_the_v1_answer_and_the_new_fields_beside_it(gateway, t):
    body = post(gateway, AUTHORIZE, v1_body(t, "r1", region="us-east")).json()
    assert {k: body[k] for k in ("allowed", "org", "reserved_tokens")} == {
        "allowed": True, "org": t.org.pk, "reserved_tokens": 100}
    assert body["reservation_id"].startswith(f"rsv_{t.pool.pk}_{t.org.pk}_{t.key.pk}_")
    assert body["headers"] == {
        "x-ratelimit-limit-tokens": "1000", "x-ratelimit-remaining-tokens": "900",
        "x-ratelimit-reset-tokens": "1s",
        "x-ratelimit-limit-tokens-day": "100000", "x-ratelimit-remaining-tokens-day": "99900",
        "x-ratelimit-reset-tokens-day": "12h0m0s",
        "x-ratelimit-limit-requests": "2", "x-ratelimit-remaining-requests": "1",
        "x-ratelimit-reset-requests": "0ms",
    }
    assert set(body) == {"allowed", "reservation_id", "org", "reserved_tokens", "headers",
                         "pool", "service_tier", "reserved_input_tokens",
                         "reserved_output_tokens", "tokens_refill_tps"}
    assert body["tokens_refill_tps"] == 100  # the 1,000-token bucket holds 10 s of its rate
    assert (body["service_tier"], body["pool"]["tier"]) == ("priority", "fast")
    assert (body["reserved_input_tokens"], body["reserved_output_tokens"]) == (30, 70)


def test_a_v1_dry_run_and_retry_answer_as_before(gateway, t):
    dry = post(gateway, AUTHORIZE, v1_body(t, "d1", dry_run=True)).json()
    assert dry["allowed"] and dry["dry_run"] is True and dry["reservation_id"] is None
    first = post(gateway, AUTHORIZE, v1_body(t, "r1")).json()
    again = post(gateway, AUTHORIZE, v1_body(t, "r1", input_tokens=999)).json()
    assert again["reservation_id"] == first["reservation_id"]
    assert again["reserved_tokens"] == first["reserved_tokens"] == 100


def test_a_v1_refusal_keeps_its_fields_and_adds_the_retry_hint(gateway, t):
    for n in range(2):
        assert post(gateway, AUTHORIZE, v1_body(t, f"r{n}")).status_code == 200
    r = post(gateway, AUTHORIZE, v1_body(t, "r2"))
    assert r.status_code == 429
    body = r.json()
    assert body["allowed"] is False
    error = body["error"]
    assert error["code"] == "concurrency_exceeded" and error["message"]
    assert 1 <= error["retry_after_ms"] <= 1000
    assert set(error) == {"code", "message", "retry_after_ms", "retryable", "scope"}
    assert V1_HEADERS | {"retry-after", "retry-after-ms"} <= set(body["headers"])
    assert body["headers"]["x-should-retry"] == "true"


def test_v1_refusals_without_limits_keep_their_codes_and_statuses(gateway, t):
    wrong_key = post(gateway, AUTHORIZE, v1_body(t, "k", api_key="sk_000000000000_nope"))
    assert (wrong_key.status_code, wrong_key.json()["error"]["code"]) == (401,
                                                                          "invalid_api_key")
    unknown = post(gateway, AUTHORIZE, v1_body(t, "m", model="no-such-model"))
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "unknown_model")
    malformed = post(gateway, AUTHORIZE, v1_body(t, "x", max_output_tokens=0))
    assert (malformed.status_code, malformed.json()["error"]["code"]) == (400, "invalid_input")


def test_a_v1_usage_event_is_recorded_as_before(gateway, t, limiter_clock,
                                                django_capture_on_commit_callbacks):
    grant = post(gateway, AUTHORIZE, v1_body(t, "u1")).json()
    with django_capture_on_commit_callbacks(execute=True):
        r = post(gateway, USAGE, event("u1", limiter_clock,
                                       reservation_id=grant["reservation_id"]))
    assert r.json() == {"results": [{"request_id": "u1", "result": "recorded"}],
                        "recorded": 1, "duplicates": 0, "rejected": 0}
