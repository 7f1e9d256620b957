"""An API key may carry its own TPS (input, output), daily-token and
concurrency limits within its org's allocation; owners and admins set them (portal, REST); the
admission engine enforces them in the same script as the org's, all or nothing; the headers
show the tighter; a refusal by the key's slice says `error.scope: "key"`."""

import pytest

from orgs.models import ApiKey, AuditEvent, Role
from orgs.services.api_keys import KeySlice, api_key_create, api_key_limits_set
from quotas.hook.gateway_tokens import gateway_token_cache_clear, gateway_token_create
from quotas.hook.routing import pool_routes_reload
from quotas.limiter.engine import limiter_settle
from quotas.limiter.schema import Settlement
from quotas.publish import limiter_sync_pool
from tests.aio import limiter_authorize
from tests.factories import AllocationFactory, MembershipFactory, PoolFactory, UserFactory
from tests.hook import HookClient
from tests.quotas.conftest import tenant_create, threads_race

pytestmark = pytest.mark.django_db(transaction=True)  # the served app's threads read rows


def sliced(t, *, commit, default_service_tier="auto", **limits) -> tuple[ApiKey, str]:
    """A second key of t's org with its own slice, published."""
    key, secret = api_key_create(org=t.org, name="sliced", actor="test")
    with commit(execute=True):
        api_key_limits_set(key=key, key_slice=KeySlice(**limits), actor="test",
                           default_service_tier=default_service_tier)
    return key, secret


def authorize(t, request_id, secret, *, input_tokens=10, max_output_tokens=90):
    return limiter_authorize(pool_id=t.pool.pk, api_key=secret, request_id=request_id,
                             input_tokens=input_tokens, max_output_tokens=max_output_tokens)


@pytest.fixture
def t(limiter):
    return tenant_create(guaranteed_tps=1_000, burst_tps=1_000, daily_tokens=1_000_000,
                         max_concurrency=100)


# --- Enforcement ------------------------------------------------------------------------------

def test_a_keys_tps_slice_refuses_with_scope_key_and_the_org_keeps_the_rest(
        t, django_capture_on_commit_callbacks):
    key, secret = sliced(t, commit=django_capture_on_commit_callbacks, output_tps=50)
    for n in range(5):  # 500 tokens: the key's bucket (50 tokens/s x 10 s)
        d = authorize(t, f"k{n}", secret)
        assert d.allowed
    # The headers show the tighter: the key's bucket, now empty.
    assert (d.tokens_limit, d.tokens_remaining) == (500, 0)
    refused = authorize(t, "k5", secret)
    assert (refused.outcome, refused.scope, refused.limit) == ("tps_exceeded", "key", "output")
    assert refused.retry_after_ms == 2_000  # 100 tokens at 50 tokens/s
    # All or nothing: the refusal took nothing from the org, whose other key goes on.
    other = authorize(t, "o1", t.plaintext)
    assert other.allowed and other.tokens_remaining == 10_000 - 600


def test_the_orgs_limit_refuses_with_scope_org_when_it_is_the_tighter(
        t, django_capture_on_commit_callbacks):
    _, secret = sliced(t, commit=django_capture_on_commit_callbacks, output_tps=900)
    assert authorize(t, "big", t.plaintext, input_tokens=9_000, max_output_tokens=500).allowed
    refused = authorize(t, "k1", secret, input_tokens=400, max_output_tokens=500)
    assert (refused.outcome, refused.scope) == ("tps_exceeded", "org")
    assert refused.tokens_remaining == 500  # the org's bucket, tighter than the key's 9,000


def test_a_keys_daily_and_concurrency_slices(t, django_capture_on_commit_callbacks):
    _, secret = sliced(t, commit=django_capture_on_commit_callbacks, daily_tokens=250,
                       max_concurrency=2)
    assert authorize(t, "k1", secret).allowed
    d = authorize(t, "k2", secret)
    assert (d.requests_limit, d.requests_remaining) == (2, 0)
    assert (d.day_limit, d.day_remaining) == (250, 50)
    refused = authorize(t, "k3", secret)
    assert (refused.outcome, refused.scope) == ("concurrency_exceeded", "key")
    limiter_settle(pool_id=t.pool.pk, settlements=[Settlement(
        request_id="k1", org_id=t.org.pk, input_tokens=10, output_tokens=10,
        api_key_id=d.api_key_id)])
    d = authorize(t, "k4", secret)  # the slot is free, and 80 tokens came back to the day
    assert d.allowed and d.day_remaining == 250 - 20 - 100 - 100
    refused = authorize(t, "k5", secret)
    assert (refused.outcome, refused.scope) == ("concurrency_exceeded", "key")


def test_a_keys_day_after_a_flush_is_rebuilt_from_recorded_usage(
        t, limiter, django_capture_on_commit_callbacks):
    from metering.models import UsageHourly

    key, secret = sliced(t, commit=django_capture_on_commit_callbacks, daily_tokens=1_000)
    from quotas.limiter.clock import clock

    UsageHourly.objects.create(org=t.org, pool=t.pool, api_key=key,
                               hour=clock.now().replace(minute=0), requests=1,
                               input_tokens=500, output_tokens=300)
    limiter.flushdb()
    d = authorize(t, "k1", secret)
    assert d.allowed and d.day_remaining == 1_000 - 800 - 100


@pytest.mark.django_db(transaction=True)
def test_fifty_threads_on_a_sliced_key_never_pass_its_slice(limiter, patient_redis):
    t = tenant_create(guaranteed_tps=10_000, burst_tps=10_000, daily_tokens=10**9,
                      max_concurrency=1_000)
    key, secret = api_key_create(org=t.org, name="sliced", actor="test")
    api_key_limits_set(key=key, key_slice=KeySlice(output_tps=100, max_concurrency=30),
                       default_service_tier="auto", actor="test")
    limiter_sync_pool(pool_id=t.pool.pk)
    outcomes: list = []

    def worker(i):
        d = authorize(t, f"w{i}", secret, input_tokens=0, max_output_tokens=50)
        outcomes.append((d.outcome, d.scope))

    threads_race(50, worker)
    # 1,000 tokens in the key's bucket: 20 requests of 50; its 30 slots are not the limit.
    assert outcomes.count(("allowed", None)) == 20
    assert outcomes.count(("tps_exceeded", "key")) == 30


def test_a_refusal_by_the_key_says_scope_key_over_http(t, django_capture_on_commit_callbacks):
    gateway_token_cache_clear()
    pool_routes_reload()
    _, token = gateway_token_create(name="edge-slices", actor="test")
    _, secret = sliced(t, commit=django_capture_on_commit_callbacks, max_concurrency=1)
    hook = HookClient(HTTP_AUTHORIZATION=f"Bearer {token}")
    body = {"api_key": secret, "model": t.pool.model, "input_tokens": 1,
            "max_output_tokens": 1}
    assert hook.post("/api/gateway/v1/authorize", {**body, "request_id": "a"},
                     content_type="application/json").status_code == 200
    refused = hook.post("/api/gateway/v1/authorize", {**body, "request_id": "b"},
                        content_type="application/json").json()
    assert refused["error"]["code"] == "concurrency_exceeded"
    assert refused["error"]["scope"] == "key" and refused["error"]["retryable"] is True
    assert refused["headers"]["x-ratelimit-limit-requests"] == "1"


# --- Setting them: REST and the portal ------------------------------------------------------------

def url(org, key):
    return f"/api/v1/orgs/{org.pk}/api-keys/{key.pk}/limits/"


@pytest.fixture
def owned(two_orgs, limiter):
    alpha, bravo = two_orgs
    AllocationFactory(org=alpha.org, pool=PoolFactory(), guaranteed_tps=1_000, burst_tps=2_000,
                      daily_tokens=50_000, max_concurrency=20)
    key, _ = api_key_create(org=alpha.org, name="dev", actor="test")
    return alpha, bravo, key


def test_an_owner_sets_a_keys_limits_over_rest(owned, published_limits,
                                              django_capture_on_commit_callbacks):
    alpha, _, key = owned
    with django_capture_on_commit_callbacks(execute=True):
        r = alpha.client.put(url(alpha.org, key), {
            "slice_output_tps": 500, "slice_daily_tokens": 10_000, "slice_max_concurrency": 5,
            "default_service_tier": "default"}, format="json")
    assert r.status_code == 200, r.json()
    assert (r.json()["slice_output_tps"], r.json()["slice_input_tps"],
            r.json()["default_service_tier"]) == (500, None, "default")
    assert AuditEvent.objects.filter(action="api_key.limits_set").count() == 1
    assert published_limits == [alpha.org.pk]
    r = alpha.client.put(url(alpha.org, key), {}, format="json")  # back to the org's limits
    key.refresh_from_db()
    assert not key.has_slice and key.default_service_tier == "auto"


def test_a_slice_above_the_allocation_is_refused_with_a_clear_code(owned):
    alpha, _, key = owned
    r = alpha.client.put(url(alpha.org, key), {"slice_output_tps": 2_001,
                                               "slice_daily_tokens": 50_000,
                                               "slice_input_tps": 10}, format="json")
    assert r.status_code == 422
    error = r.json()["error"]
    assert error["code"] == "key_slice_above_allocation"
    assert set(error["fields"]) == {"slice_output_tps", "slice_input_tps"}
    key.refresh_from_db()
    assert not key.has_slice


@pytest.mark.parametrize("body, field", [({"slice_output_tps": 0}, "slice_output_tps"),
                                         ({"slice_daily_tokens": "x"}, "slice_daily_tokens"),
                                         ({"default_service_tier": "flex"},
                                          "default_service_tier")])
def test_malformed_limits_are_400(owned, body, field):
    alpha, _, key = owned
    r = alpha.client.put(url(alpha.org, key), body, format="json")
    assert r.status_code == 400 and field in r.json()["error"]["fields"]


def test_another_orgs_key_is_404_and_developers_cannot_set_limits(owned):
    alpha, bravo, key = owned
    assert bravo.client.put(url(alpha.org, key), {"slice_output_tps": 1},
                            format="json").status_code == 404
    assert bravo.client.put(url(bravo.org, key), {"slice_output_tps": 1},
                            format="json").status_code == 404
    developer = UserFactory()
    MembershipFactory(org=alpha.org, user=developer, role=Role.DEVELOPER)
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(developer)
    assert client.put(url(alpha.org, key), {"slice_output_tps": 1},
                      format="json").status_code == 403


def test_the_portal_form_sets_a_keys_limits(owned, client):
    from tests.factories import PASSWORD

    alpha, _, key = owned
    client.login(username=alpha.owner.username, password=PASSWORD)
    page = f"/portal/o/{alpha.org.slug}/keys/{key.pk}/limits/"
    assert client.get(page).status_code == 200
    r = client.post(page, {"slice_output_tps": "3000", "default_service_tier": "auto"})
    assert r.status_code == 422 and "Above the organization" in r.content.decode()
    r = client.post(page, {"slice_output_tps": "300", "slice_max_concurrency": "3",
                           "default_service_tier": "default"})
    assert r.status_code == 302
    key.refresh_from_db()
    assert (key.slice_output_tps, key.slice_max_concurrency, key.default_service_tier) == (
        300, 3, "default")
    listing = client.get(f"/portal/o/{alpha.org.slug}/keys/").content.decode()
    assert "300 output tokens/s" in listing and "tier default" in listing
