"""The usage reads behind the portal's charts, against real PostgreSQL (date_bin, sums)."""

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from metering.models import UsageEvent, UsageHourly, UsageStatus
from metering.selectors import (
    delivered_speed,
    usage_by_key,
    usage_hourly_series,
    usage_tokens_by_pool,
    usage_tps_series,
)
from orgs.services import api_key_create
from tests.factories import OrganizationFactory, PoolFactory, UserFactory

pytestmark = pytest.mark.django_db

NOON = datetime(2026, 11, 20, 12, tzinfo=UTC)


def _event(org, pool, *, at, tokens=(100, 200), status=UsageStatus.COMPLETED, key=None,
           ttft_ms=None, output_tps=None):
    UsageEvent.objects.create(
        request_id=uuid.uuid4().hex, org=org, pool=pool, api_key=key, status=status,
        input_tokens=tokens[0], output_tokens=tokens[1], started_at=at,
        finished_at=at + timedelta(seconds=3), ttft_ms=ttft_ms, output_tps=output_tps)


@pytest.fixture
def org_pool():
    return OrganizationFactory(), PoolFactory()


def test_tps_series_bins_by_minute_and_fills_quiet_minutes(org_pool):
    org, pool = org_pool
    _event(org, pool, at=NOON + timedelta(seconds=5))
    _event(org, pool, at=NOON + timedelta(seconds=59), status=UsageStatus.FAILED, tokens=(6, 0))
    _event(org, pool, at=NOON + timedelta(minutes=2, seconds=1))
    _event(OrganizationFactory(), pool, at=NOON)  # another org's traffic
    series = usage_tps_series(org=org, since=NOON, until=NOON + timedelta(minutes=3),
                              bucket_seconds=60)
    assert [(p.at.minute, p.tokens, p.requests, p.errors) for p in series] == [
        (0, 306, 2, 1), (1, 0, 0, 0), (2, 300, 1, 0), (3, 0, 0, 0)]
    assert series[0].tps(60) == pytest.approx(5.1)


def test_hourly_series_sums_keys_and_covers_every_hour(org_pool):
    org, pool = org_pool
    for hour, tokens in ((NOON - timedelta(hours=2), 10), (NOON, 20), (NOON, 5)):
        UsageHourly.objects.create(org=org, pool=pool, hour=hour, requests=1, errors=0,
                                   input_tokens=tokens, output_tokens=tokens,
                                   api_key=api_key_create(org=org, name=f"k{tokens}",
                                                          actor=UserFactory())[0])
    series = usage_hourly_series(org=org, since=NOON - timedelta(hours=2, minutes=30),
                                 until=NOON + timedelta(minutes=10))
    assert [(p.at.hour, p.tokens, p.requests) for p in series] == [
        (9, 0, 0), (10, 20, 1), (11, 0, 0), (12, 50, 2)]


def test_by_key_speed_and_pool_totals(org_pool):
    org, pool = org_pool
    key, _ = api_key_create(org=org, name="voice", actor=UserFactory())
    UsageHourly.objects.create(org=org, pool=pool, api_key=key, hour=NOON, requests=2,
                               errors=1, input_tokens=100, output_tokens=3000,
                               ttft_ms_total=900, ttft_count=2, decode_ms_total=10_000)
    UsageHourly.objects.create(org=org, pool=pool, api_key=None, hour=NOON, requests=1,
                               input_tokens=1, output_tokens=1)
    rows = usage_by_key(org=org, since=NOON)
    assert [(r.name, r.requests, r.avg_ttft_ms, r.output_tps) for r in rows] == [
        ("voice", 2, 450, 300.0), ("(no key)", 1, None, None)]
    assert usage_tokens_by_pool(org=org, since=NOON) == {pool.pk: 3102}
    _event(org, pool, at=NOON, ttft_ms=200, output_tps=300.0)
    _event(org, pool, at=NOON, ttft_ms=400, output_tps=100.0)
    [speed] = delivered_speed(org=org, since=NOON)
    assert (speed.requests, speed.ttft_p50_ms, speed.output_tps_p50) == (2, 300, 200.0)


def test_delivered_speed_counts_every_request_and_measures_the_completed_ones(org_pool):
    org, pool = org_pool
    other = OrganizationFactory()
    for i, (ttft, tps) in enumerate([(100, 700.0), (200, 650.0), (300, 600.0), (2_500, 200.0)]):
        _event(org, pool, at=NOON + timedelta(minutes=i), ttft_ms=ttft, output_tps=tps)
    _event(org, pool, at=NOON, status=UsageStatus.FAILED, ttft_ms=50, output_tps=900.0)
    _event(org, pool, at=NOON, status=UsageStatus.CANCELLED, ttft_ms=80, output_tps=800.0)
    _event(other, pool, at=NOON, ttft_ms=900, output_tps=100.0)
    _event(org, pool, at=NOON - timedelta(hours=2), ttft_ms=5, output_tps=9_999.0)  # too old
    [speed] = delivered_speed(org=org, since=NOON)
    # Six requests, two of them errors (failed, cancelled); four measured.
    assert (speed.requests, speed.errors, speed.measured, speed.tokens) == (6, 2, 4, 1_800)
    assert speed.ttft_p50_ms == 250 and speed.ttft_p95_ms == pytest.approx(2_170)
    assert speed.output_tps_p50 == 625.0 and speed.output_tps_p5 == pytest.approx(260.0)
    by_org = {s.group["org_id"]: s for s in delivered_speed(since=NOON, by=("pool_id",
                                                                              "org_id"))}
    assert by_org[org.pk].measured == 4 and by_org[other.pk].measured == 1
    [pool_row] = delivered_speed(since=NOON, by=("pool_id",))
    assert pool_row.group == {"pool_id": pool.pk} and pool_row.requests == 7
