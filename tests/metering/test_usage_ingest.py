"""POST /api/gateway/v1/usage: durable, idempotent, rolled up, settled in Redis."""

import threading
from datetime import timedelta

import pytest
from django.db import connection

from metering.models import UsageEvent, UsageHourly
from orgs.models import ApiKey
from quotas.hook.gateway_tokens import gateway_token_cache_clear, gateway_token_create
from quotas.hook.routing import pool_routes_reload
from tests.hook import HookClient
from tests.quotas.conftest import tenant_create

pytestmark = pytest.mark.django_db(transaction=True)  # the served app's threads read rows
USAGE = "/api/gateway/v1/usage"
AUTHORIZE = "/api/gateway/v1/authorize"


@pytest.fixture
def gateway(limiter):
    gateway_token_cache_clear()
    _, plaintext = gateway_token_create(name="edge-1", actor="test")
    return HookClient(HTTP_AUTHORIZATION=f"Bearer {plaintext}")


def authorize(client, t, request_id, *, input_tokens=100, max_output_tokens=400):
    r = client.post(AUTHORIZE, {"request_id": request_id, "api_key": t.plaintext,
                                "model": t.pool.model, "input_tokens": input_tokens,
                                "max_output_tokens": max_output_tokens},
                    content_type="application/json")
    return r.json()


def event(request_id, clock, *, reservation_id=None, input_tokens=100, output_tokens=300,
          status="completed", ttft_ms=200, decode_ms=500):
    start = clock.now() - timedelta(seconds=5)
    first = start + timedelta(milliseconds=ttft_ms) if ttft_ms is not None else None
    finish = (first or start) + timedelta(milliseconds=decode_ms)
    body = {"request_id": request_id, "input_tokens": input_tokens,
            "output_tokens": output_tokens, "status": status,
            "started_at": start.isoformat(),
            "first_token_at": first.isoformat() if first else None,
            "finished_at": finish.isoformat()}
    if reservation_id:
        body["reservation_id"] = reservation_id
    return body


def _post(client, body):
    return client.post(USAGE, body, content_type="application/json")


@pytest.fixture
def report(django_capture_on_commit_callbacks):
    """Post usage and run the after-commit settlement, as a real commit would."""
    def post(client, body):
        with django_capture_on_commit_callbacks(execute=True):
            return _post(client, body)
    return post


def test_usage_is_recorded_derived_rolled_up_and_settled(gateway, t, limiter_clock, report):
    grant = authorize(gateway, t, "r1")
    assert grant["headers"]["x-ratelimit-remaining-tokens-day"] == "99500"
    r = report(gateway, event("r1", limiter_clock, reservation_id=grant["reservation_id"]))
    assert r.status_code == 200
    assert r.json() == {"results": [{"request_id": "r1", "result": "recorded"}],
                        "recorded": 1, "duplicates": 0, "rejected": 0}
    e = UsageEvent.objects.get(request_id="r1")
    assert (e.org_id, e.pool_id, e.api_key_id) == (t.org.pk, t.pool.pk, t.key.pk)
    assert (e.ttft_ms, e.output_tps, e.premium_eligible, e.unreserved) == (200, 600.0, True,
                                                                            False)
    h = UsageHourly.objects.get()
    assert (h.requests, h.errors, h.input_tokens, h.output_tokens) == (1, 0, 100, 300)
    assert (h.premium_input_tokens, h.premium_output_tokens) == (100, 300)
    assert (h.ttft_ms_total, h.ttft_count, h.decode_ms_total) == (200, 1, 500)
    # Settled: the 100 unused tokens are back in the day's quota, the slot is free.
    after = authorize(gateway, t, "r2", input_tokens=1, max_output_tokens=1)
    assert after["headers"]["x-ratelimit-remaining-tokens-day"] == str(100_000 - 400 - 2)
    assert after["headers"]["x-ratelimit-remaining-requests"] == "4"
    assert ApiKey.objects.get(pk=t.key.pk).last_used_at is not None


def test_usage_found_by_request_id_alone_while_the_reservation_lives(gateway, t,
                                                                    limiter_clock, report):
    authorize(gateway, t, "r1")
    r = report(gateway, event("r1", limiter_clock))
    assert r.json()["recorded"] == 1
    assert UsageEvent.objects.get().unreserved is False


def test_retries_and_in_batch_duplicates_are_counted_once(gateway, t, limiter_clock, report):
    grants = {f"r{i}": authorize(gateway, t, f"r{i}")["reservation_id"] for i in range(3)}
    events = [event(rid, limiter_clock, reservation_id=res) for rid, res in grants.items()]
    first = report(gateway, {"events": events + [events[0]]}).json()
    assert [x["result"] for x in first["results"]] == ["recorded"] * 3 + ["duplicate"]
    again = report(gateway, {"events": events}).json()
    assert (again["recorded"], again["duplicates"]) == (0, 3)
    h = UsageHourly.objects.get()
    assert (h.requests, h.input_tokens, h.output_tokens) == (3, 300, 900)
    assert authorize(gateway, t, "r9", input_tokens=1, max_output_tokens=1)["headers"][
        "x-ratelimit-remaining-tokens-day"] == str(100_000 - 3 * 400 - 2)


def test_usage_after_the_reservation_expired_is_still_recorded_and_counted(
        gateway, t, limiter_clock, settings, report):
    settings.RESERVATION_TTL_SECONDS = 60
    grant = authorize(gateway, t, "r1")
    limiter_clock.advance(seconds=61)
    r = report(gateway, event("r1", limiter_clock, reservation_id=grant["reservation_id"]))
    assert r.json()["recorded"] == 1
    assert UsageEvent.objects.get().unreserved is True


def test_usage_for_a_request_admitted_while_failing_open_is_counted(gateway, t,
                                                                    limiter_clock, report):
    from quotas.hook.reservations import reservation_id_issue

    reservation = reservation_id_issue(pool_id=t.pool.pk, org_id=t.org.pk,
                                       api_key_id=t.key.pk, request_id="open-1")
    r = report(gateway, event("open-1", limiter_clock, reservation_id=reservation))
    assert r.json()["recorded"] == 1
    assert UsageEvent.objects.get().unreserved is True
    # Counted against today's quota in Redis too.
    assert authorize(gateway, t, "r2", input_tokens=1, max_output_tokens=1)["headers"][
        "x-ratelimit-remaining-tokens-day"] == str(100_000 - 400 - 2)


def test_a_late_report_of_yesterdays_unreserved_usage_is_not_todays(gateway, t, limiter_clock,
                                                                    report):
    """Usage without a reservation counts on the UTC day it started, as a rebuild of the day's
    counter from PostgreSQL counts it: yesterday's, reported after midnight, leaves today's
    quota whole; and the TPS buckets, refilled since it finished, owe nothing for it."""
    from quotas.hook.reservations import reservation_id_issue

    reservation = reservation_id_issue(pool_id=t.pool.pk, org_id=t.org.pk,
                                       api_key_id=t.key.pk, request_id="late-1")
    late = event("late-1", limiter_clock, reservation_id=reservation)  # 5 s before noon
    limiter_clock.advance(hours=12, minutes=1)  # 00:01 UTC the next day
    assert report(gateway, late).json()["recorded"] == 1
    assert UsageEvent.objects.get().unreserved is True
    headers = authorize(gateway, t, "r2", input_tokens=1, max_output_tokens=1)["headers"]
    assert headers["x-ratelimit-remaining-tokens-day"] == str(100_000 - 2)
    assert int(headers["x-ratelimit-remaining-tokens"]) == int(
        headers["x-ratelimit-limit-tokens"]) - 2


def test_unattributable_and_forged_events_are_rejected_per_event(gateway, t, limiter_clock,
                                                                 report):
    grant = authorize(gateway, t, "r1")
    body = {"events": [event("never-seen", limiter_clock),
                       event("r2", limiter_clock, reservation_id=grant["reservation_id"]),
                       event("r1", limiter_clock, reservation_id=grant["reservation_id"])]}
    results = report(gateway, body).json()["results"]
    assert [(x["result"], x.get("error", {}).get("code")) for x in results] == [
        ("rejected", "unknown_request"), ("rejected", "invalid_reservation"),
        ("recorded", None)]
    assert list(UsageEvent.objects.values_list("request_id", flat=True)) == ["r1"]


@pytest.mark.parametrize("ttft_ms, decode_ms, status, premium", [
    (200, 500, "completed", True),
    (2500, 500, "completed", False),   # first token later than the 2,000 ms ceiling
    (200, 1500, "completed", False),   # 300 tokens in 1.5 s = 200 tokens/s < 300 floor
    (200, 500, "failed", False),
    (None, 500, "failed", False),
])
def test_premium_eligibility(gateway, t, limiter_clock, ttft_ms, decode_ms, status, premium,
                             report):
    grant = authorize(gateway, t, "r1")
    report(gateway, event("r1", limiter_clock, reservation_id=grant["reservation_id"],
                          ttft_ms=ttft_ms, decode_ms=decode_ms, status=status))
    assert UsageEvent.objects.get().premium_eligible is premium
    h = UsageHourly.objects.get()
    assert h.premium_output_tokens == (300 if premium else 0)
    assert h.errors == (0 if status == "completed" else 1)


@pytest.mark.parametrize("change, field", [
    ({"request_id": "bad id"}, "request_id"),
    ({"input_tokens": -1}, "input_tokens"),
    ({"output_tokens": None}, "output_tokens"),
    ({"status": "done"}, "status"),
    ({"started_at": "yesterday"}, "started_at"),
    ({"started_at": "2026-01-01T00:00:00"}, "started_at"),  # no time zone
    # Well-formed timestamps out of order or out of the window are rejected per event
    # (tests/metering/test_usage_timestamps.py).
])
def test_malformed_batches_are_400_and_write_nothing(gateway, t, limiter_clock, change, field,
                                                     report):
    grant = authorize(gateway, t, "r1")
    good = event("r1", limiter_clock, reservation_id=grant["reservation_id"])
    bad = {**event("r2", limiter_clock), **change}
    r = report(gateway, {"events": [good, bad]})
    assert r.status_code == 400
    assert field in r.json()["error"]["fields"]["events"]["1"]
    single = report(gateway, bad)
    assert single.status_code == 400 and field in single.json()["error"]["fields"]
    assert UsageEvent.objects.count() == 0 and UsageHourly.objects.count() == 0


@pytest.mark.parametrize("body", [{"events": []}, {"events": "x"}, [1], "text"])
def test_malformed_envelopes_are_400(gateway, t, body, report):
    assert report(gateway, body).status_code == 400


def test_more_than_1000_events_is_400(gateway, t, limiter_clock, report):
    body = {"events": [event(f"r{i}", limiter_clock) for i in range(1001)]}
    assert report(gateway, body).status_code == 400


@pytest.mark.django_db(transaction=True)
def test_concurrent_retries_of_the_same_batch_count_each_event_once(limiter, limiter_clock):
    from quotas.hook.reservations import reservation_id_issue

    t = tenant_create()
    pool_routes_reload()
    gateway_token_cache_clear()
    _, token = gateway_token_create(name="edge", actor="test")
    events = [event(f"r{i}", limiter_clock, reservation_id=reservation_id_issue(
        pool_id=t.pool.pk, org_id=t.org.pk, api_key_id=t.key.pk, request_id=f"r{i}"))
        for i in range(200)]
    barrier = threading.Barrier(6)
    recorded = []

    def send():
        client = HookClient(HTTP_AUTHORIZATION=f"Bearer {token}")
        barrier.wait()
        try:
            recorded.append(_post(client, {"events": events}).json()["recorded"])
        finally:
            connection.close()  # each thread has its own connection

    threads = [threading.Thread(target=send) for _ in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert sum(recorded) == 200
    h = UsageHourly.objects.get()
    assert (h.requests, h.input_tokens, h.output_tokens) == (200, 20_000, 60_000)
