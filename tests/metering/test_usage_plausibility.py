"""Usage no model could have produced is refused on its own, `implausible_usage`
(metering/plausibility.py, docs/hook.md "Plausible usage"); its reservation is left as if the
event had not been reported, and a corrected report is recorded."""

from datetime import timedelta

import pytest
from django.test import Client

from metering.models import UsageEvent
from metering.plausibility import OUTPUT_BURST_TOKENS, SPEED_CEILING_FACTOR
from quotas.hook.gateway_tokens import gateway_token_cache_clear, gateway_token_create
from quotas.hook.routing import pool_routes_reload
from quotas.limiter.engine import limiter_reservations_lookup

pytestmark = pytest.mark.django_db
USAGE, AUTHORIZE = "/api/gateway/v1/usage", "/api/gateway/v1/authorize"


@pytest.fixture
def hook(tenant):
    pool_routes_reload()
    gateway_token_cache_clear()
    _, token = gateway_token_create(name="edge", actor="test")
    return Client(HTTP_AUTHORIZATION=f"Bearer {token}")


@pytest.fixture
def report(hook, django_capture_on_commit_callbacks):
    def post(*events):
        with django_capture_on_commit_callbacks(execute=True):
            r = hook.post(USAGE, {"events": list(events)}, content_type="application/json")
        assert r.status_code == 200, r.content[:300]
        return {x["request_id"]: x.get("error", {}).get("code", x["result"])
                for x in r.json()["results"]}
    return post


def authorized(hook, tenant, request_id: str) -> str:
    r = hook.post(AUTHORIZE, {"request_id": request_id, "api_key": tenant.plaintext,
                              "model": tenant.pool.model, "input_tokens": 10,
                              "max_output_tokens": 40}, content_type="application/json")
    assert r.json()["allowed"] is True, r.json()
    return r.json()["reservation_id"]


def event(request_id, reservation_id, *, output_tokens, started, finished, first=None):
    return {"request_id": request_id, "reservation_id": reservation_id, "input_tokens": 100,
            "output_tokens": output_tokens, "status": "completed",
            "started_at": started.isoformat(), "finished_at": finished.isoformat(),
            "first_token_at": first.isoformat() if first else None}


def test_ten_million_tokens_in_a_microsecond_are_refused_alone(hook, tenant, limiter_clock,
                                                               report):
    now = limiter_clock.now()
    first = now - timedelta(seconds=1)
    forged = authorized(hook, tenant, "forged")
    honest = authorized(hook, tenant, "honest")
    outcome = report(
        event("forged", forged, output_tokens=10_000_000, started=first - timedelta(seconds=1),
              first=first, finished=first + timedelta(microseconds=1)),
        event("honest", honest, output_tokens=400, started=now - timedelta(seconds=3),
              first=now - timedelta(seconds=2), finished=now))
    assert outcome == {"forged": "implausible_usage", "honest": "recorded"}
    assert list(UsageEvent.objects.values_list("request_id", flat=True)) == ["honest"]
    # Its reservation is left as it was: still live, settled by nothing, expiring on its own.
    held = limiter_reservations_lookup(pool_id=tenant.pool.pk, request_ids=["forged"])
    assert held[0] is not None and held[0].live == 1
    # The gateway may report it again with its real timings.
    assert report(event("forged", forged, output_tokens=450, started=now - timedelta(seconds=4),
                        first=now - timedelta(seconds=3), finished=now)) == {
        "forged": "recorded"}


def test_the_bound_is_the_pool_s_ceiling_over_the_request_s_whole_duration(hook, tenant,
                                                                           limiter_clock,
                                                                           report):
    ceiling = SPEED_CEILING_FACTOR * tenant.pool.speed_floor_output_tps
    assert ceiling >= 5_000  # the default floor (300 tokens/s): 6,000 tokens/s
    now = limiter_clock.now()
    start = now - timedelta(seconds=2)
    most = OUTPUT_BURST_TOKENS + 2 * ceiling
    outcome = report(
        event("at-bound", authorized(hook, tenant, "at-bound"), output_tokens=most,
              started=start, finished=now),
        event("above", authorized(hook, tenant, "above"), output_tokens=most + 1,
              started=start, finished=now),
        # A whole (non-streamed) answer: every token arrives with the first.
        event("whole", authorized(hook, tenant, "whole"), output_tokens=4_000, started=start,
              first=now, finished=now),
        event("instant", authorized(hook, tenant, "instant"),
              output_tokens=OUTPUT_BURST_TOKENS, started=now, first=now, finished=now))
    assert outcome == {"at-bound": "recorded", "above": "implausible_usage",
                       "whole": "recorded", "instant": "recorded"}
