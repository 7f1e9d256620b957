"""Usage no model could have produced is refused on its own, `implausible_usage`
(metering/plausibility.py, docs/hook.md "Plausible usage"); its reservation is left as if the
event had not been reported, and a corrected report is recorded.

Most cases call usage_record, what the usage endpoint runs whatever serves it; the reservation
case needs a real authorize, over the hook."""

from datetime import timedelta

import pytest
from django.test import Client

from metering.models import UsageEvent
from metering.plausibility import OUTPUT_BURST_TOKENS, SPEED_CEILING_FACTOR
from metering.usage import usage_record
from quotas.hook.gateway_tokens import gateway_token_cache_clear, gateway_token_create
from quotas.hook.inputs import usage_input
from quotas.hook.reservations import reservation_id_issue
from quotas.hook.routing import pool_routes_reload
from quotas.limiter.engine import limiter_reservations_lookup

pytestmark = pytest.mark.django_db


@pytest.fixture
def record(tenant, django_capture_on_commit_callbacks):
    """Record events (settled after the commit, as for real); {request_id: result or code}."""
    pool_routes_reload()

    def post(*events):
        with django_capture_on_commit_callbacks(execute=True):
            results = usage_record(events=usage_input({"events": list(events)}))
        return {r.request_id: r.error_code or r.result for r in results}
    return post


def event(tenant, request_id, *, output_tokens, started, finished, first=None,
          reservation_id=None):
    return {"request_id": request_id, "input_tokens": 10, "output_tokens": output_tokens,
            "status": "completed", "started_at": started.isoformat(),
            "finished_at": finished.isoformat(),
            "first_token_at": first.isoformat() if first else None,
            "reservation_id": reservation_id or reservation_id_issue(
                pool_id=tenant.pool.pk, org_id=tenant.org.pk, api_key_id=tenant.key.pk,
                request_id=request_id)}


def test_ten_million_tokens_in_a_microsecond_are_refused_alone(tenant, limiter_clock, record):
    now = limiter_clock.now()
    first = now - timedelta(seconds=1)
    outcome = record(
        event(tenant, "forged", output_tokens=10_000_000, started=first - timedelta(seconds=1),
              first=first, finished=first + timedelta(microseconds=1)),
        event(tenant, "honest", output_tokens=400, started=now - timedelta(seconds=3),
              first=now - timedelta(seconds=2), finished=now))
    assert outcome == {"forged": "implausible_usage", "honest": "recorded"}
    assert list(UsageEvent.objects.values_list("request_id", flat=True)) == ["honest"]


def test_the_bound_is_the_pool_s_ceiling_over_the_request_s_whole_duration(tenant,
                                                                           limiter_clock,
                                                                           record):
    ceiling = SPEED_CEILING_FACTOR * tenant.pool.speed_floor_output_tps
    assert ceiling >= 5_000  # the default floor (300 tokens/s): 6,000 tokens/s
    now = limiter_clock.now()
    start = now - timedelta(seconds=2)
    most = OUTPUT_BURST_TOKENS + 2 * ceiling
    outcome = record(
        event(tenant, "at-bound", output_tokens=most, started=start, finished=now),
        event(tenant, "above", output_tokens=most + 1, started=start, finished=now),
        # A whole (non-streamed) answer: every token arrives with the first.
        event(tenant, "whole", output_tokens=4_000, started=start, first=now, finished=now),
        event(tenant, "instant", output_tokens=OUTPUT_BURST_TOKENS, started=now, first=now,
              finished=now))
    assert outcome == {"at-bound": "recorded", "above": "implausible_usage",
                       "whole": "recorded", "instant": "recorded"}


def test_a_refused_event_leaves_its_reservation_and_may_be_reported_again(tenant,
                                                                          limiter_clock,
                                                                          record):
    gateway_token_cache_clear()
    _, token = gateway_token_create(name="edge", actor="test")
    hook = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    pool_routes_reload()
    granted = hook.post("/api/gateway/v1/authorize", {
        "request_id": "r1", "api_key": tenant.plaintext, "model": tenant.pool.model,
        "input_tokens": 10, "max_output_tokens": 40}, content_type="application/json").json()
    assert granted["allowed"] is True, granted
    now = limiter_clock.now()
    forged = event(tenant, "r1", output_tokens=10_000_000, started=now - timedelta(seconds=2),
                   finished=now, reservation_id=granted["reservation_id"])
    assert record(forged) == {"r1": "implausible_usage"}
    # Its reservation is left as it was: still live, settled by nothing, expiring on its own.
    held = limiter_reservations_lookup(pool_id=tenant.pool.pk, request_ids=["r1"])
    assert held[0] is not None and held[0].live == 1
    # The request_id is not taken: the gateway may report it again with its real usage.
    assert record({**forged, "output_tokens": 40}) == {"r1": "recorded"}
    assert UsageEvent.objects.get().output_tokens == 40
