"""Service tiers. A model served by a fast and a standard pool in one region
routes by `service_tier`; with `auto`, what the fast pool refuses for TPS or pool capacity
spills to the org's standard allocation, and the answer names the pool and tier that serve it."""

import pytest
from django.db import connection

from metering.models import UsageEvent
from orgs.services.api_keys import KeySlice, api_key_create, api_key_limits_set
from quotas.hook.gateway_tokens import gateway_token_cache_clear, gateway_token_create
from quotas.hook.reservations import reservation_id_parse
from quotas.hook.routing import pool_routes_reload
from quotas.limiter.clock import clock
from quotas.models import Allocation
from quotas.publish import limiter_sync_pool
from tests.factories import AllocationFactory, OrganizationFactory, PoolFactory
from tests.hook import HookClient
from tests.metering.test_usage_ingest import USAGE, event
from tests.quotas.conftest import threads_race

pytestmark = pytest.mark.django_db(transaction=True)  # the served app's threads read rows
URL = "/api/gateway/v1/authorize"


class Tiers:
    def __init__(self, *, fast_tps=100, standard_tps=1_000, fast=True, standard=True):
        self.fast = PoolFactory(model="sol", region="us-east", tier="fast")
        self.standard = PoolFactory(model="sol", region="us-east", tier="standard")
        self.org = OrganizationFactory()
        limits = {"daily_tokens": 10**9, "max_concurrency": 1_000}
        if fast:
            AllocationFactory(org=self.org, pool=self.fast, guaranteed_tps=fast_tps,
                              burst_tps=fast_tps, **limits)
        if standard:
            AllocationFactory(org=self.org, pool=self.standard, guaranteed_tps=standard_tps,
                              burst_tps=standard_tps, **limits)
        self.key, self.plaintext = api_key_create(org=self.org, name="k", actor="test")
        self.sync()

    def sync(self):
        for pool in (self.fast, self.standard):
            limiter_sync_pool(pool_id=pool.pk)
        pool_routes_reload()


@pytest.fixture
def hook(limiter):
    gateway_token_cache_clear()
    _, token = gateway_token_create(name="edge-tiers", actor="test")
    return HookClient(HTTP_AUTHORIZATION=f"Bearer {token}")


def ask(client, tiers, request_id, *, input_tokens=100, max_output_tokens=400, api_key=None,
        **extra):
    return client.post(URL, {"request_id": request_id, "api_key": api_key or tiers.plaintext,
                             "model": "sol", "input_tokens": input_tokens,
                             "max_output_tokens": max_output_tokens, **extra},
                       content_type="application/json")


def served(response) -> tuple[str, str]:
    body = response.json()
    return body["pool"]["tier"], body["service_tier"]


def test_a_fast_and_a_standard_pool_in_one_region_route_by_tier(hook):
    tiers = Tiers()
    assert served(ask(hook, tiers, "a")) == ("fast", "priority")
    assert served(ask(hook, tiers, "p", service_tier="priority")) == ("fast", "priority")
    assert served(ask(hook, tiers, "d", service_tier="default")) == ("standard", "default")
    body = ask(hook, tiers, "d2", service_tier="default").json()
    assert body["pool"] == {"id": tiers.standard.pk, "model": "sol", "region": "us-east",
                            "tier": "standard"}
    ref = reservation_id_parse(body["reservation_id"], request_id="d2")
    assert ref.pool_id == tiers.standard.pk


@pytest.mark.parametrize("tier", ["flex", "", "PRIORITY", 1])
def test_an_unknown_service_tier_is_400(hook, tier):
    r = ask(hook, Tiers(), "x", service_tier=tier)
    assert r.status_code == 400 and "service_tier" in r.json()["error"]["fields"]


def test_auto_spills_to_standard_when_the_fast_pool_refuses_for_tps(hook):
    tiers = Tiers(fast_tps=100)  # a 1,000-token fast bucket
    first = ask(hook, tiers, "r1", input_tokens=100, max_output_tokens=800)
    assert served(first) == ("fast", "priority")
    spilled = ask(hook, tiers, "r2", input_tokens=100, max_output_tokens=800)
    assert spilled.status_code == 200 and served(spilled) == ("standard", "default")
    # The headers are the standard allocation's (10,000-token bucket).
    assert spilled.json()["headers"]["x-ratelimit-limit-tokens"] == "10000"
    # A request that asks for priority does not spill.
    refused = ask(hook, tiers, "r3", input_tokens=100, max_output_tokens=800,
                  service_tier="priority")
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "tps_exceeded"


def test_an_org_with_only_a_standard_allocation_is_served_there(hook):
    tiers = Tiers(fast=False)
    assert served(ask(hook, tiers, "r1")) == ("standard", "default")
    refused = ask(hook, tiers, "r2", service_tier="priority")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "no_allocation"


def test_a_daily_quota_refusal_does_not_spill(hook):
    tiers = Tiers()
    Allocation.objects.filter(pool=tiers.fast).update(daily_tokens=100)
    tiers.sync()
    r = ask(hook, tiers, "r1")
    assert r.status_code == 429 and r.json()["error"]["code"] == "daily_quota_exhausted"


def test_a_retried_spilled_request_keeps_its_standard_reservation(hook):
    tiers = Tiers(fast_tps=100)
    assert served(ask(hook, tiers, "r1", max_output_tokens=800)) == ("fast", "priority")
    spilled = ask(hook, tiers, "r2", max_output_tokens=800).json()
    clock.advance(seconds=10)  # the fast bucket is full again
    again = ask(hook, tiers, "r2", max_output_tokens=800).json()
    assert again["reservation_id"] == spilled["reservation_id"]
    assert again["pool"]["tier"] == "standard"
    # The fast pool reserved nothing for the retry: its bucket is still full.
    assert ask(hook, tiers, "r3", input_tokens=0, max_output_tokens=1).json()["headers"][
        "x-ratelimit-remaining-tokens"] == "999"


def test_a_key_with_a_default_tier_stays_there_unless_the_request_asks(hook,
                                                                       django_capture_on_commit_callbacks):
    tiers = Tiers()
    batch, secret = api_key_create(org=tiers.org, name="batch", actor="test")
    with django_capture_on_commit_callbacks(execute=True):
        api_key_limits_set(key=batch, key_slice=KeySlice(), default_service_tier="default",
                           actor="test")
    for n in range(3):  # the first asks the fast pool (learning the key's tier), then not
        assert served(ask(hook, tiers, f"b{n}", api_key=secret)) == ("standard", "default")
    assert served(ask(hook, tiers, "bp", api_key=secret, service_tier="priority")) == (
        "fast", "priority")
    # The key's default changes back: the next auto request goes to the fast pool again.
    with django_capture_on_commit_callbacks(execute=True):
        api_key_limits_set(key=batch, key_slice=KeySlice(), default_service_tier="auto",
                           actor="test")
    assert served(ask(hook, tiers, "b9", api_key=secret)) == ("fast", "priority")


def test_premium_applies_to_fast_usage_only(hook, limiter_clock,
                                            django_capture_on_commit_callbacks):
    tiers = Tiers()
    for tier, request_id in (("priority", "f1"), ("default", "s1")):
        grant = ask(hook, tiers, request_id, service_tier=tier).json()
        with django_capture_on_commit_callbacks(execute=True):
            hook.post(USAGE, event(request_id, limiter_clock,
                                   reservation_id=grant["reservation_id"]),
                      content_type="application/json")
    eligible = dict(UsageEvent.objects.values_list("request_id", "premium_eligible"))
    assert eligible == {"f1": True, "s1": False}


@pytest.mark.django_db(transaction=True)
def test_fifty_threads_spill_what_the_fast_pool_cannot_hold(limiter, patient_redis):
    gateway_token_cache_clear()
    _, token = gateway_token_create(name="edge-race", actor="test")
    tiers = Tiers(fast_tps=100, standard_tps=10_000)  # fast bucket: 1,000 tokens
    answers: list = [None] * 50

    def worker(i):
        client = HookClient(HTTP_AUTHORIZATION=f"Bearer {token}")
        try:
            answers[i] = ask(client, tiers, f"w{i}", input_tokens=50, max_output_tokens=50)
        finally:
            connection.close()

    threads_race(50, worker)
    tiers_served = [served(a)[0] for a in answers if a.status_code == 200]
    assert len(tiers_served) == 50
    assert tiers_served.count("fast") == 10  # 10 x 100 tokens fill the fast bucket
    assert tiers_served.count("standard") == 40
    # Each request holds exactly one reservation: the fast bucket is empty, the standard one
    # lent 40 x 100 tokens of its 100,000.
    fast_left = ask(HookClient(HTTP_AUTHORIZATION=f"Bearer {token}"), tiers, "after-f",
                    input_tokens=0, max_output_tokens=1, service_tier="priority")
    assert fast_left.status_code == 429
    standard = ask(HookClient(HTTP_AUTHORIZATION=f"Bearer {token}"), tiers, "after-s",
                   input_tokens=0, max_output_tokens=1, service_tier="default").json()
    assert standard["headers"]["x-ratelimit-remaining-tokens"] == str(100_000 - 40 * 100 - 1)


def test_usage_without_reservation_id_is_attributed_to_the_pool_that_served_it(
        hook, limiter_clock, django_capture_on_commit_callbacks):
    tiers = Tiers(fast_tps=100)
    ask(hook, tiers, "r1", max_output_tokens=800)
    ask(hook, tiers, "r2", max_output_tokens=800)  # spilled: a marker in the fast pool
    with django_capture_on_commit_callbacks(execute=True):
        hook.post(USAGE, {"events": [event("r2", limiter_clock)]},
                  content_type="application/json")
    assert UsageEvent.objects.get(request_id="r2").pool_id == tiers.standard.pk
