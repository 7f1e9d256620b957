"""The window a usage event's timestamps may name (docs/hook.md, "Accepted timestamps"): an
event outside it is rejected on its own, with a code, and the rest of its batch is recorded and
settled."""

from datetime import timedelta

import pytest

from metering.models import UsageEvent, UsageHourly
from metering.usage import FUTURE_SKEW, LONGEST_REQUEST
from quotas.hook.gateway_tokens import gateway_token_cache_clear, gateway_token_create
from quotas.hook.reservations import reservation_id_issue
from quotas.hook.routing import pool_routes_reload
from quotas.publish import limiter_sync_pool
from tests.hook import HookClient

pytestmark = pytest.mark.django_db(transaction=True)  # the served app's threads read rows
USAGE, AUTHORIZE = "/api/gateway/v1/usage", "/api/gateway/v1/authorize"


@pytest.fixture
def hook(tenant):
    pool_routes_reload()
    gateway_token_cache_clear()
    _, token = gateway_token_create(name="edge", actor="test")
    return HookClient(HTTP_AUTHORIZATION=f"Bearer {token}", raise_request_exception=False)


def event(tenant, request_id, started, finished, first=None) -> dict:
    """Timestamps are ISO strings or datetimes."""
    def text(t):
        return t if isinstance(t, str) or t is None else t.isoformat()
    return {"request_id": request_id, "input_tokens": 100, "output_tokens": 50,
            "status": "completed", "started_at": text(started), "first_token_at": text(first),
            "finished_at": text(finished),
            "reservation_id": reservation_id_issue(pool_id=tenant.pool.pk, org_id=tenant.org.pk,
                                                   api_key_id=tenant.key.pk,
                                                   request_id=request_id)}


@pytest.fixture
def report(hook, django_capture_on_commit_callbacks):
    """Post a batch; the after-commit work (billing's counters, settlement) runs as on a real
    commit, and an exception there fails the test."""
    def post(*events):
        with django_capture_on_commit_callbacks(execute=True):
            return hook.post(USAGE, {"events": list(events)}, content_type="application/json")
    return post


def outcomes(r) -> dict:
    assert r.status_code == 200, r.content[:300]
    return {x["request_id"]: x.get("error", {}).get("code", x["result"])
            for x in r.json()["results"]}


def test_an_event_from_the_future_is_rejected(tenant, limiter_clock, report):
    now = limiter_clock.now()
    r = report(event(tenant, "ok", now - timedelta(seconds=2), now - timedelta(seconds=1)),
               event(tenant, "skewed", now + FUTURE_SKEW - timedelta(seconds=2),
                     now + FUTURE_SKEW - timedelta(seconds=1)),
               event(tenant, "ahead", now + timedelta(minutes=30),
                     now + timedelta(minutes=31)),
               event(tenant, "next-month", now + timedelta(days=40),
                     now + timedelta(days=40, seconds=1)),
               event(tenant, "ends-ahead", now - timedelta(seconds=1),
                     now + FUTURE_SKEW + timedelta(seconds=1)))
    assert outcomes(r) == {"ok": "recorded", "skewed": "recorded",
                           "ahead": "started_at_out_of_range",
                           "next-month": "started_at_out_of_range",
                           "ends-ahead": "finished_at_out_of_range"}
    assert set(UsageEvent.objects.values_list("request_id", flat=True)) == {"ok", "skewed"}


def test_tomorrow_s_usage_does_not_count_against_today_after_a_rebuild(tenant, hook,
                                                                        limiter_clock):
    tomorrow = (limiter_clock.now() + timedelta(days=1)).replace(hour=1, minute=0, second=0)
    UsageHourly.objects.create(org=tenant.org, pool=tenant.pool, api_key=tenant.key,
                               hour=tomorrow, requests=1, input_tokens=40_000,
                               output_tokens=0)
    limiter_sync_pool(pool_id=tenant.pool.pk)
    r = hook.post(AUTHORIZE, {"request_id": "a1", "api_key": tenant.plaintext,
                              "model": tenant.pool.model, "input_tokens": 100,
                              "max_output_tokens": 400}, content_type="application/json")
    assert r.json()["headers"]["x-ratelimit-remaining-tokens-day"] == str(100_000 - 500)


def test_a_first_token_weeks_after_the_start_fails_only_its_own_event(tenant, limiter_clock,
                                                                      report):
    now = limiter_clock.now()
    start = now - timedelta(days=26)
    r = report(event(tenant, "ok", now - timedelta(seconds=2), now - timedelta(seconds=1)),
               event(tenant, "slow", start, now - timedelta(seconds=1),
                     first=start + timedelta(days=25)),
               event(tenant, "long", now - LONGEST_REQUEST - timedelta(seconds=2),
                     now - timedelta(seconds=1)))
    assert outcomes(r) == {"ok": "recorded", "slow": "duration_out_of_range",
                           "long": "duration_out_of_range"}
    assert UsageHourly.objects.get().requests == 1


def test_extreme_years_with_offsets_are_rejected_and_the_rest_is_settled(tenant, limiter_clock,
                                                                        report, redis_client):
    now = limiter_clock.now()
    r = report(event(tenant, "ok", now - timedelta(seconds=2), now - timedelta(seconds=1)),
               event(tenant, "year-9999", now - timedelta(seconds=2),
                     "9999-12-31T23:00:00-05:00", first="9999-12-31T22:00:00-05:00"),
               event(tenant, "year-1", "0001-01-01T00:00:00+05:00",
                     now - timedelta(seconds=1)))
    assert outcomes(r) == {"ok": "recorded", "year-9999": "finished_at_out_of_range",
                           "year-1": "started_at_out_of_range"}
    assert list(UsageEvent.objects.values_list("request_id", flat=True)) == ["ok"]


def test_timestamps_out_of_order_fail_only_their_own_event(tenant, limiter_clock, report):
    now = limiter_clock.now()
    second = timedelta(seconds=1)
    r = report(event(tenant, "ok", now - 3 * second, now - second, first=now - 2 * second),
               event(tenant, "ends-first", now - second, now - 3 * second),
               event(tenant, "token-first", now - 2 * second, now - second,
                     first=now - 3 * second),
               event(tenant, "token-after", now - 3 * second, now - 2 * second,
                     first=now - second))
    assert outcomes(r) == {"ok": "recorded", "ends-first": "timestamps_out_of_order",
                           "token-first": "timestamps_out_of_order",
                           "token-after": "timestamps_out_of_order"}
