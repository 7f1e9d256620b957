import csv
import io
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from metering.models import UsageEvent, UsageHourly, UsageStatus
from metering.selectors import usage_tps_series
from orgs.models import ApiKey
from orgs.services import api_key_create
from tests.factories import AllocationFactory

pytestmark = pytest.mark.django_db


def _event(org, pool, key, *, at, i=100, o=200, status=UsageStatus.COMPLETED):
    return UsageEvent.objects.create(
        request_id=f"req-{uuid.uuid4().hex}", org=org, pool=pool, api_key=key, status=status,
        input_tokens=i, output_tokens=o, started_at=at - timedelta(seconds=2),
        first_token_at=at - timedelta(seconds=1), finished_at=at, ttft_ms=1000, output_tps=200.0)


def _hourly(org, pool, key, *, hour, i=100, o=200, requests=1, errors=0):
    return UsageHourly.objects.create(org=org, pool=pool, api_key=key, hour=hour,
                                      requests=requests, errors=errors, input_tokens=i,
                                      output_tokens=o, ttft_ms_total=1000 * requests,
                                      ttft_count=requests, decode_ms_total=1000)


@pytest.fixture
def traffic(orgs):
    a, _ = orgs
    allocation = AllocationFactory(org=a.org, guaranteed_tps=50, burst_tps=80,
                                   daily_tokens=1_000_000)
    key, _ = api_key_create(org=a.org, name="voice", actor=a.owner)
    now = timezone.now()
    for seconds in (30, 40, 200):
        _event(a.org, allocation.pool, key, at=now - timedelta(seconds=seconds))
    _event(a.org, allocation.pool, key, at=now - timedelta(seconds=50),
           status=UsageStatus.FAILED, i=10, o=0)
    _hourly(a.org, allocation.pool, key, hour=now.replace(minute=0, second=0, microsecond=0),
            i=310, o=600, requests=4, errors=1)
    return a, allocation, key


def test_tps_series_buckets_per_minute_in_sql(traffic):
    a, _, _ = traffic
    now = timezone.now()
    series = usage_tps_series(org=a.org, since=now - timedelta(hours=1), bucket_seconds=60,
                              until=now)
    assert 60 <= len(series) <= 61
    assert sum(p.tokens for p in series) == 3 * 300 + 10
    assert sum(p.requests for p in series) == 4 and sum(p.errors for p in series) == 1
    assert all(p.at.second == 0 for p in series)


def test_usage_page_shows_the_traffic_against_the_allocation(traffic):
    a, _, key = traffic
    page = a.client.get(f"/portal/o/{a.org.slug}/usage/").content.decode()
    assert 'data-field="hour_tokens">910<' in page
    assert 'data-field="hour_errors">1<' in page
    assert 'data-limit="Guaranteed" data-value="50"' in page
    assert 'data-limit="Burst ceiling" data-value="80"' in page
    assert 'data-field="used_today">910<' in page
    assert f'data-key="{key.lookup}"' in page
    assert 'hx-trigger="every 10s"' in page
    live = a.client.get(f"/portal/o/{a.org.slug}/usage/live/")
    assert live.status_code == 200 and "<html" not in live.content.decode()


def test_usage_pages_are_404_for_the_other_org(traffic, orgs):
    a, b = orgs
    for url in ("usage/", "usage/live/", "usage/export.csv?start=2026-01-01&end=2026-01-02"):
        assert b.client.get(f"/portal/o/{a.org.slug}/{url}").status_code == 404


@pytest.mark.parametrize("keys", [1, 6])
def test_usage_page_queries_do_not_grow_with_keys(traffic, django_assert_num_queries, keys):
    a, allocation, _ = traffic
    hour = timezone.now().replace(minute=0, second=0, microsecond=0)
    for i in range(keys):
        key, _ = api_key_create(org=a.org, name=f"k{i}", actor=a.owner)
        _hourly(a.org, allocation.pool, key, hour=hour - timedelta(hours=2))
    a.client.get(f"/portal/o/{a.org.slug}/usage/")
    # Session, user, membership, the switcher's memberships, then: allocations, minute series,
    # day series, today's series, today's pool totals, speed in total and per key, per-key rows.
    with django_assert_num_queries(12):
        assert a.client.get(f"/portal/o/{a.org.slug}/usage/").status_code == 200


def test_csv_export_streams_the_range(traffic):
    a, allocation, key = traffic
    old = datetime(2026, 3, 5, 10, tzinfo=UTC)
    _hourly(a.org, allocation.pool, key, hour=old, i=7, o=8)
    _hourly(a.org, allocation.pool, key, hour=old + timedelta(days=3), i=1, o=1)  # outside
    response = a.client.get(f"/portal/o/{a.org.slug}/usage/export.csv",
                            {"start": "2026-03-01", "end": "2026-03-07"})
    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"] == "text/csv"
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert rows[0][0] == "hour_utc"
    assert [r[5:7] for r in rows[1:]] == [["7", "8"]]
    assert rows[1][2] == ApiKey.objects.get(pk=key.pk).display_prefix


@pytest.mark.parametrize(("start", "end", "field"), [
    ("2026-03-07", "2026-03-01", "end"), ("2025-01-01", "2026-03-01", "end"),
    ("yesterday", "2026-03-01", "start")])
def test_csv_export_range_errors_are_shown_on_the_form(traffic, start, end, field):
    a, _, _ = traffic
    response = a.client.get(f"/portal/o/{a.org.slug}/usage/export.csv",
                            {"start": start, "end": end})
    assert response.status_code == 400
    assert field in response.context["export_form"].errors
    assert "Export usage as CSV" in response.content.decode()
