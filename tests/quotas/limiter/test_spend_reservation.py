"""With a spend cap, authorize holds each request's worst-case price
(reserved tokens x the pool's prices, premium included) against cap - month to date - money
held, and settle releases it once billing has added the rated price. A burst of requests in
flight can no longer sail past the cap."""

from datetime import timedelta

import pytest
from django.db import connection

from billing.models import PriceVersion
from billing.services.accounts import spend_cap_set
from billing.services.caps import month_to_date_micros
from quotas.hook.gateway_tokens import gateway_token_cache_clear, gateway_token_create
from quotas.hook.routing import pool_routes_reload
from quotas.limiter.clock import clock
from quotas.limiter.connection import limiter_client
from quotas.limiter.schema import KEY, MONEY, pool_key
from quotas.publish import limiter_sync_pool
from tests.aio import limiter_authorize
from tests.factories import PoolFactory
from tests.hook import HookClient
from tests.metering.test_usage_ingest import AUTHORIZE, USAGE, event
from tests.quotas.conftest import tenant_create, threads_race

pytestmark = pytest.mark.django_db(transaction=True)  # the served app's threads read rows
# Reserved: 1,000 input + 1,000 output (the pool's estimate) at $5 / $30 per million tokens,
# plus a $1 / $2 premium: 6,000 + 32,000 micro-dollars.
RESERVED_MICROS = 1_000 * 6 + 1_000 * 32


def capped(*, cap_micros, commit=None):
    pool = PoolFactory(capacity_tps=10**6, output_estimate_default=1_000)
    PriceVersion.objects.create(pool=pool, effective_from=clock.now().replace(
        minute=0, second=0, microsecond=0) - timedelta(days=40),
        input_micros_per_mtok=5_000_000, output_micros_per_mtok=30_000_000,
        premium_input_micros_per_mtok=1_000_000, premium_output_micros_per_mtok=2_000_000)
    t = tenant_create(pool=pool, guaranteed_tps=10**5, burst_tps=10**5, daily_tokens=10**12,
                      max_concurrency=10**4)
    spend_cap_set(org=t.org, cap_micros=cap_micros, thresholds=[100], actor="test")
    limiter_sync_pool(pool_id=pool.pk)  # what the cap's after-commit publish does
    pool_routes_reload()
    return t


def held(t) -> int:
    return int(limiter_client().hget(pool_key(t.pool.pk, KEY.money, t.org.pk), MONEY.total)
               or 0)


def authorize(t, request_id):
    return limiter_authorize(pool_id=t.pool.pk, api_key=t.plaintext, request_id=request_id,
                             input_tokens=1_000, max_output_tokens=32_000)


def test_money_is_held_until_the_cap_would_be_passed(limiter):
    t = capped(cap_micros=3 * RESERVED_MICROS - 1)
    assert authorize(t, "r1").allowed and authorize(t, "r2").allowed
    assert held(t) == 2 * RESERVED_MICROS
    assert authorize(t, "r3").outcome == "spend_cap_reached"  # 3 x 38,000 > the cap
    assert held(t) == 2 * RESERVED_MICROS


def test_settling_converts_the_hold_into_the_rated_price(limiter, limiter_clock,
                                                          django_capture_on_commit_callbacks):
    t = capped(cap_micros=10**9)
    gateway_token_cache_clear()
    _, token = gateway_token_create(name="edge-money", actor="test")
    hook = HookClient(HTTP_AUTHORIZATION=f"Bearer {token}")
    grant = hook.post(AUTHORIZE, {"request_id": "r1", "api_key": t.plaintext,
                                  "model": t.pool.model, "input_tokens": 1_000},
                      content_type="application/json").json()
    assert held(t) == RESERVED_MICROS
    with django_capture_on_commit_callbacks(execute=True):
        hook.post(USAGE, event("r1", limiter_clock, reservation_id=grant["reservation_id"],
                               input_tokens=1_000, output_tokens=500),
                  content_type="application/json")
    assert held(t) == 0
    spent = int(limiter_client().get(pool_key(t.pool.pk, KEY.spend, t.org.pk,
                                              limiter_clock.now().strftime("%Y%m"))))
    # Rated: 1,000 x $6 + 500 x $32 per million (delivered fast: premium kept).
    assert spent == 1_000 * 6 + 500 * 32 == month_to_date_micros(org=t.org,
                                                                  now=limiter_clock.now())


def test_an_expired_reservation_releases_its_money(limiter, limiter_clock, settings):
    settings.RESERVATION_TTL_SECONDS = 60
    t = capped(cap_micros=2 * RESERVED_MICROS)
    assert authorize(t, "r1").allowed and authorize(t, "r2").allowed
    assert authorize(t, "r3").outcome == "spend_cap_reached"
    limiter_clock.advance(seconds=61)  # their usage never came
    assert authorize(t, "r4").allowed
    assert held(t) == RESERVED_MICROS


def test_an_org_without_a_cap_holds_nothing(limiter):
    t = capped(cap_micros=10**9)
    spend_cap_set(org=t.org, cap_micros=0, thresholds=[100], actor="test")
    limiter_sync_pool(pool_id=t.pool.pk)
    assert authorize(t, "r1").allowed and held(t) == 0


THREADS = 50


def _race(t, token, *, output_tokens: int) -> list[str]:
    """THREADS gateways send requests (authorize, then usage) until the cap refuses them."""
    refusals: list[str] = []

    def gateway(worker: int) -> None:
        client = HookClient(HTTP_AUTHORIZATION=f"Bearer {token}")
        try:
            for n in range(1_000):
                rid = f"w{worker}-{n}"
                r = client.post(AUTHORIZE, {"request_id": rid, "api_key": t.plaintext,
                                            "model": t.pool.model, "input_tokens": 1_000},
                                content_type="application/json").json()
                if not r["allowed"]:
                    refusals.append(r["error"]["code"])
                    return
                client.post(USAGE, event(rid, clock, reservation_id=r["reservation_id"],
                                         input_tokens=1_000, output_tokens=output_tokens),
                            content_type="application/json")
        finally:
            connection.close()

    threads_race(THREADS, gateway)
    return refusals


@pytest.mark.django_db(transaction=True)
def test_fifty_gateways_racing_to_the_cap_never_pass_it(limiter, patient_redis):
    """Every request uses less than it reserved: recorded spend never exceeds the cap."""
    cap = 100 * RESERVED_MICROS
    t = capped(cap_micros=cap)
    gateway_token_cache_clear()
    _, token = gateway_token_create(name="edge-race", actor="test")
    refusals = _race(t, token, output_tokens=800)
    assert refusals == ["spend_cap_reached"] * THREADS
    spent = month_to_date_micros(org=t.org, now=clock.now())
    per_request = 1_000 * 6 + 800 * 32
    assert spent <= cap
    # Stopped only when the next hold did not fit: less than one reservation per gateway short.
    assert spent > cap - THREADS * RESERVED_MICROS
    assert spent % per_request == 0 and held(t) == 0


@pytest.mark.django_db(transaction=True)
def test_overshoot_passes_the_cap_by_at_most_the_requests_in_flight(limiter, patient_redis):
    """Requests that use more than they reserved (3,000 output tokens for 1,000 reserved): the
    cap is passed by at most the rating error of the requests in flight when the last one was
    admitted, at most one per gateway (here 50 x (3,000 - 1,000) x $32 per million)."""
    cap = 100 * RESERVED_MICROS
    t = capped(cap_micros=cap)
    gateway_token_cache_clear()
    _, token = gateway_token_create(name="edge-over", actor="test")
    refusals = _race(t, token, output_tokens=3_000)
    assert set(refusals) == {"spend_cap_reached"}
    spent = month_to_date_micros(org=t.org, now=clock.now())
    assert spent <= cap + THREADS * (3_000 - 1_000) * 32
    assert held(t) == 0
