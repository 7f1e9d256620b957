"""Hourly rollups compacted to days: every figure kept, every reader (rating, costs, the Usage
API, the console's charts, the CSV export) gives the same answer before and after, and a day
whose prices change after midnight keeps its hours."""

import random
from collections import defaultdict
from datetime import UTC, date, datetime, timedelta

import pytest
from django.db import IntegrityError
from django.db.models import Sum

from billing.costs import org_daily_costs
from billing.models import BillingAccount, PriceVersion
from billing.rating import total_cents
from billing.selectors import month_rated_lines, usage_rows_for_export
from metering.models import UsageHourly
from metering.retention import usage_rollups_compact
from metering.selectors import org_usage_buckets
from metering.usage_report import UsageQuery, usage_completions
from orgs.services.api_keys import api_key_create
from sluice.time_buckets import bucket_page
from tests.factories import OrganizationFactory, PoolFactory

pytestmark = pytest.mark.django_db

MARCH = date(2025, 3, 1)
START, END = datetime(2025, 3, 1, tzinfo=UTC), datetime(2025, 4, 1, tzinfo=UTC)
# 400 days (the default hourly retention) after March: every day of it is old enough.
NOW = END + timedelta(days=400, hours=3)
A_CHANGE = datetime(2025, 3, 10, 14, tzinfo=UTC)  # public price of pool A, mid-day
A_NEGOTIATED = datetime(2025, 3, 15, 9, tzinfo=UTC)  # the org's own price of pool A, mid-day
B_CHANGE = datetime(2025, 3, 20, tzinfo=UTC)  # public price of pool B, at midnight


def _price(pool, at, base, org=None):
    PriceVersion.objects.create(pool=pool, org=org, effective_from=at,
                                input_micros_per_mtok=base, output_micros_per_mtok=6 * base,
                                premium_input_micros_per_mtok=base // 3,
                                premium_output_micros_per_mtok=base)


@pytest.fixture
def march():
    """Two pools with price changes in March 2025, an org with a discount, two keys and
    keyless usage, and another org; every third hour of the month used, figures at random."""
    a, b = PoolFactory(model="sol-fast"), PoolFactory(model="luna-fast")
    org, other = OrganizationFactory(), OrganizationFactory()
    BillingAccount.objects.create(org=org, discount_bps=1234)
    keys = [api_key_create(org=org, name=f"k{n}", actor="test")[0] for n in (1, 2)] + [None]
    for pool in (a, b):
        _price(pool, datetime(2025, 1, 1, tzinfo=UTC), 5_000_000)
    _price(a, A_CHANGE, 4_000_000)
    _price(a, A_NEGOTIATED, 3_300_001, org=org)
    _price(b, B_CHANGE, 7_000_003)
    rng = random.Random(15)
    rows = []
    for hour in range(0, 31 * 24, 3):
        at = START + timedelta(hours=hour)
        for who, pool, key in [(org, a, k) for k in keys] + [(org, b, keys[0]),
                                                            (other, a, None)]:
            i, o = rng.randrange(10**4, 10**7), rng.randrange(10**4, 10**7)
            requests = rng.randrange(1, 500)
            rows.append(UsageHourly(
                org=who, pool=pool, api_key=key, hour=at, requests=requests,
                errors=rng.randrange(0, requests), input_tokens=i, output_tokens=o,
                premium_input_tokens=rng.randrange(0, i), premium_output_tokens=o
                if rng.random() < 0.5 else rng.randrange(0, o),
                ttft_ms_total=rng.randrange(0, 10**6), ttft_count=rng.randrange(0, requests),
                decode_ms_total=rng.randrange(1, 10**7)))
    UsageHourly.objects.bulk_create(rows)
    return org, other, a, b


def _figures(org) -> dict:
    """What every reader of the rollups says about March."""
    lines = month_rated_lines(org=org, month=MARCH)
    page = bucket_page(width="1d", start_time=int(START.timestamp()),
                       end_time=int(END.timestamp()), limit=31, page=None)
    export = defaultdict(int)
    for r in usage_rows_for_export(org=org, start=START, end=END):
        for counter in ("requests", "errors", "input_tokens", "output_tokens",
                        "premium_input_tokens", "premium_output_tokens"):
            export[(r.pool_id, r.api_key_id, r.hour.date(), counter)] += getattr(r, counter)
    return {
        "invoice lines": lines,
        "invoice cents": total_cents(lines),
        "costs per day": org_daily_costs(org=org, start=START, end=END),
        "usage api": usage_completions(query=UsageQuery(
            org=org, page=page, group_by=("api_key_id", "model", "service_tier"))),
        "console per day": org_usage_buckets(org=org, since=START, bucket=timedelta(days=1),
                                             until=END),
        "csv export per day": dict(export),
    }


def _per_day() -> dict:
    sums = (UsageHourly.objects.values("org_id", "pool_id", "api_key_id", "hour__date")
            .annotate(**{c: Sum(c) for c in UsageHourly.COUNTERS}).order_by())
    return {(r.pop("org_id"), r.pop("pool_id"), r.pop("api_key_id"), r.pop("hour__date")): r
            for r in sums}


def test_every_reader_gives_the_same_figures_after_compaction(march):
    org, other, a, b = march
    before, before_other, cells = _figures(org), _figures(other), _per_day()
    assert before["invoice cents"] > 0 and len(before["invoice lines"]) >= 10

    result = usage_rollups_compact(now=NOW)

    assert _figures(org) == before and _figures(other) == before_other
    assert _per_day() == cells  # every figure of every org, pool, key and day
    assert sorted(result.kept_hourly) == [(a.pk, date(2025, 3, 10)), (a.pk, date(2025, 3, 15))]
    assert result.days == 31


def test_a_day_whose_prices_change_after_midnight_keeps_its_hours(march):
    _, _, a, b = march
    usage_rollups_compact(now=NOW)
    hourly = set(UsageHourly.objects.filter(hours=1).values_list("pool_id", "hour__date"))
    assert hourly == {(a.pk, date(2025, 3, 10)), (a.pk, date(2025, 3, 15))}
    # A change at midnight splits no day: pool B's 20th is one row per org and key.
    assert UsageHourly.objects.filter(pool=b, hour=B_CHANGE).get().hours == 24
    days = UsageHourly.objects.filter(hours=24)
    assert days.count() == 31 * 5 - 2 * 4  # (org, pool, key) x day, less A's two days
    assert not days.exclude(hour__hour=0).exists()


def _input_tokens(org, pool) -> int:
    return sum(ln.quantity_tokens for ln in month_rated_lines(org=org, month=MARCH)
               if ln.kind == "input" and ln.pool_id == pool.pk)


def test_compaction_is_idempotent_and_folds_late_hours_into_the_day(march):
    org, _, _, b = march
    usage_rollups_compact(now=NOW)
    assert usage_rollups_compact(now=NOW).day_rows == 0
    day = datetime(2025, 3, 5, tzinfo=UTC)
    row = UsageHourly.objects.get(org=org, pool=b, hour=day)
    tokens = _input_tokens(org, b)
    # Late usage for a compacted day lands beside it, and counts at once...
    UsageHourly.objects.create(org=org, pool=b, api_key=row.api_key, hour=day.replace(hour=5),
                               requests=1, input_tokens=2_000_000, output_tokens=0)
    assert _input_tokens(org, b) == tokens + 2_000_000
    lines = month_rated_lines(org=org, month=MARCH)
    # ... and the next run adds it to the day's row, the invoice unchanged.
    usage_rollups_compact(now=NOW)
    folded = UsageHourly.objects.get(org=org, pool=b, hour__date=day.date())
    assert (folded.hours, folded.requests, folded.input_tokens) == (
        24, row.requests + 1, row.input_tokens + 2_000_000)
    assert month_rated_lines(org=org, month=MARCH) == lines


def test_only_days_older_than_the_hourly_retention_are_compacted(march, settings):
    settings.USAGE_HOURLY_RETENTION_DAYS = 500
    usage_rollups_compact(now=datetime(2025, 3, 11, 5, tzinfo=UTC) + timedelta(days=500))
    compacted = set(UsageHourly.objects.filter(hours=24).values_list("hour__day", flat=True))
    assert compacted == set(range(1, 11))  # through the 10th, none after


def test_a_day_row_starts_at_midnight():
    org, pool = OrganizationFactory(), PoolFactory()
    with pytest.raises(IntegrityError):
        UsageHourly.objects.create(org=org, pool=pool, hour=datetime(2025, 3, 5, 5, tzinfo=UTC),
                                   hours=24)
