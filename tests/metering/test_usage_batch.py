"""One usage batch mixing every outcome: each event answered in order, and what is stored is
exactly what was reported (NULLs, strings that look like NULL, floats, offsets)."""

from datetime import UTC, timedelta, timezone

import pytest
from django.db import connection

from metering.models import UsageEvent, UsageHourly
from metering.usage import _literal, _quoted, usage_record
from quotas.hook.inputs import UsageInput
from quotas.hook.reservations import reservation_id_issue

pytestmark = pytest.mark.django_db(transaction=True)


def _event(t, request_id, start, *, api_key=True, first_ms=180, finish_ms=980, output=400,
           status="completed", cached=0, queued=None, reservation_id=None) -> UsageInput:
    first = start + timedelta(milliseconds=first_ms) if first_ms is not None else None
    signed = reservation_id_issue(pool_id=t.pool.pk, org_id=t.org.pk,
                                  api_key_id=t.key.pk if api_key else None,
                                  request_id=request_id)
    return UsageInput(request_id, reservation_id or signed, 800, output, status, start, first,
                      start + timedelta(milliseconds=finish_ms), cached, queued)


def test_a_batch_of_new_duplicate_and_rejected_events(t, limiter_clock,
                                                      django_capture_on_commit_callbacks):
    start = limiter_clock.now() - timedelta(minutes=1)
    east = start.astimezone(timezone(timedelta(hours=5, minutes=30)))
    with django_capture_on_commit_callbacks(execute=True):
        assert [r.result for r in usage_record(events=[_event(t, "before", start)])] == [
            "recorded"]
    events = [
        _event(t, "NULL", start, output=7, finish_ms=480),  # 7 / 0.3 s: not a round float
        _event(t, "before", start),  # recorded by an earlier batch
        _event(t, "no-key.no:first-token", east, api_key=False, first_ms=None,
               status="interrupted", cached=300, queued=25),
        _event(t, "forged", start, reservation_id="rsv_1_2_3_" + "0" * 20),
        _event(t, "NULL", start),  # the same request_id again in the batch
        _event(t, "late", start - timedelta(days=400)),  # older than the raw retention
    ]
    with django_capture_on_commit_callbacks(execute=True):
        results = usage_record(events=events)
    assert [(r.request_id, r.result, r.error_code) for r in results] == [
        ("NULL", "recorded", ""), ("before", "duplicate", ""),
        ("no-key.no:first-token", "recorded", ""),
        ("forged", "rejected", "invalid_reservation"), ("NULL", "duplicate", ""),
        ("late", "rejected", "started_at_out_of_range")]

    stored = {e.request_id: e for e in UsageEvent.objects.all()}
    assert set(stored) == {"before", "NULL", "no-key.no:first-token"}
    e = stored["NULL"]
    assert (e.org_id, e.pool_id, e.api_key_id, e.status) == (t.org.pk, t.pool.pk, t.key.pk,
                                                            "completed")
    assert (e.input_tokens, e.cached_input_tokens, e.output_tokens) == (800, 0, 7)
    assert (e.started_at, e.first_token_at, e.finished_at) == (
        start, start + timedelta(milliseconds=180), start + timedelta(milliseconds=480))
    assert (e.ttft_ms, e.output_tps, e.queued_ms) == (180, 7 / 0.3, None)
    assert (e.premium_eligible, e.unreserved) == (False, True)  # below the speed floor
    e = stored["no-key.no:first-token"]
    assert (e.api_key_id, e.status, e.first_token_at, e.ttft_ms, e.output_tps) == (
        None, "interrupted", None, None, None)
    assert (e.cached_input_tokens, e.queued_ms, e.premium_eligible) == (300, 25, False)
    assert e.started_at == east and e.started_at.astimezone(UTC) == start

    hour = start.replace(minute=0, second=0, microsecond=0)
    rollups = {(h.api_key_id, h.hour): h for h in UsageHourly.objects.all()}
    keyed = rollups[(t.key.pk, hour)]
    assert (keyed.requests, keyed.input_tokens, keyed.output_tokens) == (2, 1600, 407)
    assert (keyed.premium_input_tokens, keyed.premium_output_tokens) == (800, 400)
    unkeyed = rollups[(None, hour)]
    assert (unkeyed.requests, unkeyed.errors, unkeyed.interrupted) == (1, 1, 1)
    assert (unkeyed.input_tokens, unkeyed.cached_input_tokens) == (800, 300)


@pytest.mark.parametrize("values", [
    ['a"b', "c\\d", "NULL", "", "x,y", " {sp} "], ["rq-1", "null"], []])
def test_string_array_literals_read_back_as_sent(values):
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s::varchar[]", [_quoted(values)])
        assert cursor.fetchone()[0] == values


@pytest.mark.parametrize("values", [[1, None, -3, 2**62], [7 / 0.3, None, 1e-7, 1e22],
                                    [True, None, False], []])
def test_scalar_array_literals_read_back_as_sent(values):
    kind = {int: "bigint", float: "float8", bool: "boolean"}[type(values[0])] if values else "int"
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT %s::{kind}[]", [_literal(values)])
        assert cursor.fetchone()[0] == values
