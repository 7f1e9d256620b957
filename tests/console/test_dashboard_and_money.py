"""Dashboard slots (live use per pool, waitlist, next wave, billing problems), the price book
and the billing problems page."""

from datetime import date, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.models import (
    BillingAccount,
    Invoice,
    OutboxMessage,
    OutboxStatus,
    PriceVersion,
    StripeEvent,
)
from console.selectors import pools_live_use
from metering.models import UsageEvent, UsageHourly
from metering.selectors import org_usage_buckets, pools_tps_series, pools_wait_series
from orgs.models import AuditEvent, OrgStatus
from rollout.models import PoolAdmission
from tests.factories import (
    AllocationFactory,
    OrganizationFactory,
    PoolFactory,
    RolloutWaveFactory,
)
from tests.waitlist import approved_application

pytestmark = pytest.mark.django_db


def _event(org, pool, *, finished_at, tokens: int, n: int, queued_ms: int | None = None):
    UsageEvent.objects.create(
        request_id=f"r-{n}", org=org, pool=pool, status="completed", input_tokens=tokens // 2,
        output_tokens=tokens - tokens // 2, started_at=finished_at - timedelta(seconds=1),
        finished_at=finished_at, queued_ms=queued_ms)


def test_pool_tps_series_buckets_events_in_sql_with_empty_buckets_as_zero():
    pool, other = PoolFactory(), PoolFactory()
    org = OrganizationFactory(status=OrgStatus.ACTIVE)
    since = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=15)
    _event(org, pool, finished_at=since + timedelta(minutes=1), tokens=3_000, n=1)
    _event(org, pool, finished_at=since + timedelta(minutes=4), tokens=6_000, n=2)
    _event(org, pool, finished_at=since + timedelta(minutes=11), tokens=600, n=3)
    series = pools_tps_series(since=since, bucket=timedelta(minutes=5),
                              until=since + timedelta(minutes=15))
    assert [tps for _, tps in series[pool.pk]] == [30.0, 0.0, 2.0]  # 9,000 / 300 s, -, 600/300
    assert [tps for _, tps in series[other.pk]] == [0.0, 0.0, 0.0]


def test_pools_wait_series_gives_each_pool_where_requests_waited_its_waits_per_bucket():
    pool, quiet = PoolFactory(queue_max_wait_ms=10_000), PoolFactory()
    org = OrganizationFactory(status=OrgStatus.ACTIVE)
    since = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=15)
    for n, queued in enumerate((100, 300, None)):  # the last one did not wait
        _event(org, pool, finished_at=since + timedelta(minutes=2), tokens=10, n=n,
               queued_ms=queued)
    _event(org, pool, finished_at=since + timedelta(minutes=12), tokens=10, n=3, queued_ms=40)
    _event(org, quiet, finished_at=since + timedelta(minutes=2), tokens=10, n=4)
    series = pools_wait_series(since=since, bucket=timedelta(minutes=5),
                               until=since + timedelta(minutes=15))
    assert list(series) == [pool.pk]
    assert [(w.waited, w.p50_ms, w.p95_ms) for w in series[pool.pk]] == [
        (2, 200.0, 290.0), (0, None, None), (1, 40.0, 40.0)]
    assert [w.start for w in series[pool.pk]] == [since + timedelta(minutes=m)
                                                  for m in (0, 5, 10)]


def test_pool_tps_series_reads_hourly_rollups_for_hour_buckets():
    pool = PoolFactory()
    org = OrganizationFactory(status=OrgStatus.ACTIVE)
    hour = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=2)
    UsageHourly.objects.create(org=org, pool=pool, hour=hour, requests=10, input_tokens=3_600,
                               output_tokens=7_200)
    series = pools_tps_series(since=hour, bucket=timedelta(hours=1),
                              until=hour + timedelta(hours=2))
    assert [tps for _, tps in series[pool.pk]] == [3.0, 0.0]


def test_dashboard_shows_live_use_waitlist_next_wave_and_billing_problems(operator_console,
                                                                         operator_user):
    pool = PoolFactory(region="us-east")
    approved_application(operator_user, pool, "Queued Co")
    wave = RolloutWaveFactory(pool=pool, name="GA July")
    org = OrganizationFactory(status=OrgStatus.ACTIVE)
    _event(org, pool, finished_at=timezone.now() - timedelta(minutes=2), tokens=36_000, n=1)
    OutboxMessage.objects.create(kind="customer_sync", org=org, status=OutboxStatus.DEAD,
                                 last_error="Stripe said no")
    BillingAccount.objects.create(org=org, payment_failed_at=timezone.now(),
                                  grace_until=timezone.now() + timedelta(days=7))
    page = operator_console.get("/admin/")
    body = page.content.decode()
    assert pools_live_use()[pool.pk]["hour_avg"] == pytest.approx(10.0)  # 36,000 tokens / 1 h
    assert 'data-live="hour">10.0 <small>tokens/s average' in body
    assert page.context["waitlisted"] == 1 and page.context["next_wave"] == wave
    assert "GA July" in body
    assert page.context["billing"] == {"dunning": 1, "dead_letters": 1, "failed_events": 0}


def test_price_book_adds_a_version_from_a_future_whole_hour(operator_console):
    pool = PoolFactory()
    start = (timezone.now() + timedelta(hours=2)).replace(minute=0, second=0, microsecond=0)
    response = operator_console.post("/admin/console/prices/new/", {
        "pool": pool.pk, "effective_from": start.strftime("%Y-%m-%dT%H:%M"),
        "input_micros_per_mtok": "5", "output_micros_per_mtok": "30",
        "premium_input_micros_per_mtok": "0.5", "premium_output_micros_per_mtok": "3",
        "note": "launch"})
    assert response.status_code == 302
    version = PriceVersion.objects.get(pool=pool, effective_from=start)
    assert (version.input_micros_per_mtok, version.premium_output_micros_per_mtok) == (
        5_000_000, 3_000_000)
    page = operator_console.get("/admin/console/prices/").content.decode()
    assert "$30 / Mtok" in page and "$0.5 / Mtok" in page


def test_price_book_refuses_a_start_that_is_not_a_whole_hour(operator_console):
    pool = PoolFactory()
    start = (timezone.now() + timedelta(hours=2)).replace(minute=30)
    response = operator_console.post("/admin/console/prices/new/", {
        "pool": pool.pk, "effective_from": start.strftime("%Y-%m-%dT%H:%M"),
        "input_micros_per_mtok": "5", "output_micros_per_mtok": "30",
        "premium_input_micros_per_mtok": "0", "premium_output_micros_per_mtok": "0"})
    assert response.status_code == 422
    assert "whole hour" in response.content.decode()
    assert not PriceVersion.objects.filter(pool=pool).exists()


def test_billing_problems_lists_and_retries_a_dead_letter(operator_console):
    org = OrganizationFactory(status=OrgStatus.ACTIVE)
    dead = OutboxMessage.objects.create(kind="customer_sync", org=org, status=OutboxStatus.DEAD,
                                        attempts=8, last_error="Stripe said no")
    StripeEvent.objects.create(event_id="evt_1", type="invoice.paid", payload={},
                               status="failed", error="unknown invoice")
    page = operator_console.get("/admin/console/billing/")
    assert [m.pk for m in page.context["dead_letters"]] == [dead.pk]
    assert "unknown invoice" in page.content.decode()
    response = operator_console.post(f"/admin/console/billing/outbox/{dead.pk}/retry/",
                                     follow=True)
    assert f"Outbox message #{dead.pk} queued again." in response.content.decode()
    assert AuditEvent.objects.filter(action="billing.outbox_retry").count() == 1


def test_money_pages_query_count_is_constant(operator_console, django_assert_num_queries):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def add(n: int):
        org = OrganizationFactory(status=OrgStatus.ACTIVE)
        OutboxMessage.objects.create(kind="customer_sync", org=org, status=OutboxStatus.DEAD)
        BillingAccount.objects.create(org=org, grace_until=timezone.now())
        PriceVersion.objects.create(pool=PoolFactory(), org=org, effective_from=timezone.now()
                                    .replace(minute=0, second=0, microsecond=0),
                                    input_micros_per_mtok=n, output_micros_per_mtok=n)

    add(1)
    counts = {}
    for url in ("/admin/console/billing/", "/admin/console/prices/"):
        with CaptureQueriesContext(connection) as ctx:
            operator_console.get(url)
        counts[url] = len(ctx)
    for n in range(2, 5):
        add(n)
    for url, count in counts.items():
        with django_assert_num_queries(count):
            operator_console.get(url)


def test_support_reads_money_pages_but_cannot_change_money(support_console):
    org = OrganizationFactory(status=OrgStatus.ACTIVE)
    dead = OutboxMessage.objects.create(kind="customer_sync", org=org, status=OutboxStatus.DEAD)
    event = StripeEvent.objects.create(event_id="evt_2", type="invoice.paid", payload={},
                                       status="failed", error="x")
    pool = PoolFactory()
    for url in ("/admin/console/prices/", "/admin/console/billing/"):
        page = support_console.get(url)
        assert page.status_code == 200
        assert "Retry" not in page.content.decode() and "Add version" not in \
            page.content.decode()
    start = (timezone.now() + timedelta(hours=2)).strftime("%Y-%m-%dT%H:00")
    for url, body in [
        ("/admin/console/prices/new/", {"pool": pool.pk, "effective_from": start,
                                        "input_micros_per_mtok": "1",
                                        "output_micros_per_mtok": "1"}),
        (f"/admin/console/billing/outbox/{dead.pk}/retry/", {}),
        (f"/admin/console/billing/stripe-events/{event.pk}/reprocess/", {}),
    ]:
        assert support_console.post(url, body).status_code == 403, url
    assert not PriceVersion.objects.exists()
    assert OutboxMessage.objects.get(pk=dead.pk).status == OutboxStatus.DEAD
    assert StripeEvent.objects.get(pk=event.pk).status == "failed"


def test_org_usage_buckets_sum_pools_and_keys_per_hour_with_speed():
    org = OrganizationFactory(status=OrgStatus.ACTIVE)
    other = OrganizationFactory(status=OrgStatus.ACTIVE)
    a, b = PoolFactory(), PoolFactory()
    hour = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)
    for pool in (a, b):
        UsageHourly.objects.create(org=org, pool=pool, hour=hour, requests=5, errors=1,
                                   input_tokens=100, output_tokens=900, ttft_ms_total=1_000,
                                   ttft_count=5, decode_ms_total=1_500)
    UsageHourly.objects.create(org=other, pool=a, hour=hour, requests=99, output_tokens=1)
    rows = org_usage_buckets(org=org, since=hour, bucket=timedelta(hours=1),
                             until=hour + timedelta(hours=2))
    assert rows[0] == {"start": hour, "requests": 10, "errors": 2, "tokens": 2_000,
                       "output_tokens": 1_800, "avg_ttft_ms": 200.0, "output_tps": 600.0}
    assert rows[1]["requests"] == 0 and rows[1]["output_tps"] is None


def test_org_page_shows_usage_charts_and_invoices(operator_console):
    org = OrganizationFactory(status=OrgStatus.ACTIVE)
    hour = timezone.now().replace(minute=0, second=0, microsecond=0)
    UsageHourly.objects.create(org=org, pool=PoolFactory(), hour=hour, requests=7,
                               input_tokens=10, output_tokens=20)
    invoice = Invoice.objects.create(org=org, period_start=date(2026, 10, 1),
                                     period_end=date(2026, 11, 1), number="SL-2026-10-0001",
                                     total_cents=12_345)
    for usage_range, buckets in (("24h", 24), ("7d", 168)):
        page = operator_console.get(f"/admin/console/orgs/{org.pk}/?range={usage_range}")
        charts = {c.key: c.as_json() for c in page.context["charts"]}
        requests = charts["requests"]["series"][0]["values"]
        assert len(requests) == buckets and sum(requests) == 7
    body = page.content.decode()
    assert "SL-2026-10-0001" in body and "$123.45" in body
    assert f"/admin/console/invoices/{invoice.pk}/" in body
    assert "SL-2026-10-0001" in operator_console.get(
        f"/admin/console/invoices/{invoice.pk}/").content.decode()


def test_support_sees_usage_and_invoices_on_the_org_page(support_console):
    org = OrganizationFactory(status=OrgStatus.ACTIVE)
    page = support_console.get(f"/admin/console/orgs/{org.pk}/")
    assert page.status_code == 200 and page.context["invoices"] is not None


def test_operator_sets_pool_limiter_speed_and_admission(operator_console):
    pool = PoolFactory()
    response = operator_console.post(f"/admin/console/pools/{pool.pk}/settings/", {
        "guaranteeable_ratio": "0.800", "limiter_failure_policy": "fail_open",
        "speed_floor_output_tps": 400, "ttft_ceiling_ms": 1500})
    assert response.status_code == 302
    pool.refresh_from_db()
    assert (pool.guaranteeable_ratio, pool.limiter_failure_policy, pool.speed_floor_output_tps,
            pool.ttft_ceiling_ms) == (Decimal("0.800"), "fail_open", 400, 1500)
    response = operator_console.post(f"/admin/console/pools/{pool.pk}/admission/", {
        "auto_admit": "on", "quota_auto_approve_max_tps": 250,
        "quota_auto_approve_max_burst_tps": 500, "quota_auto_approve_max_daily_tokens": 10**6,
        "quota_auto_approve_max_concurrency": 4, "quota_auto_approve_window_days": 7})
    assert response.status_code == 302
    admission = PoolAdmission.objects.get(pool=pool)
    assert (admission.auto_admit, admission.quota_auto_approve_max_tps,
            admission.quota_auto_approve_max_burst_tps,
            admission.quota_auto_approve_max_daily_tokens,
            admission.quota_auto_approve_max_concurrency,
            admission.quota_auto_approve_window_days) == (True, 250, 500, 10**6, 4, 7)
    assert {"pool.settings_set", "pool.auto_admit_set", "pool.quota_auto_approve_set"} <= set(
        AuditEvent.objects.values_list("action", flat=True))


def test_operator_sets_the_pools_lease_ttl_within_its_range(operator_console):
    pool = PoolFactory()
    settings = {"guaranteeable_ratio": "0.900", "limiter_failure_policy": "fail_closed",
                "speed_floor_output_tps": 300, "ttft_ceiling_ms": 2000}
    for refused in (5, 601):
        response = operator_console.post(f"/admin/console/pools/{pool.pk}/settings/",
                                         {**settings, "lease_ttl_seconds": refused})
        assert response.status_code == 422
    response = operator_console.post(f"/admin/console/pools/{pool.pk}/settings/",
                                     {**settings, "lease_ttl_seconds": 30})
    assert response.status_code == 302
    pool.refresh_from_db()
    assert pool.lease_ttl_seconds == 30
    # Left empty, it stays as it is.
    operator_console.post(f"/admin/console/pools/{pool.pk}/settings/", settings)
    pool.refresh_from_db()
    assert pool.lease_ttl_seconds == 30
    assert "30 s without a heartbeat" in operator_console.get(
        "/admin/console/pools/").content.decode()


def test_pool_ratio_below_guarantees_is_refused_with_its_message(operator_console):
    pool = PoolFactory(capacity_tps=10_000)
    AllocationFactory(pool=pool, guaranteed_tps=8_000, burst_tps=8_000)
    response = operator_console.post(f"/admin/console/pools/{pool.pk}/settings/", {
        "guaranteeable_ratio": "0.500", "limiter_failure_policy": "fail_closed",
        "speed_floor_output_tps": 300, "ttft_ceiling_ms": 2000})
    assert response.status_code == 422
    assert "8000" in response.content.decode()
    pool.refresh_from_db()
    assert pool.guaranteeable_ratio == Decimal("0.900")


def test_support_cannot_change_pool_settings_or_admission(support_console):
    pool = PoolFactory()
    page = support_console.get("/admin/console/pools/").content.decode()
    assert "Save settings" not in page and "Save admission" not in page
    assert support_console.post(f"/admin/console/pools/{pool.pk}/settings/", {
        "guaranteeable_ratio": "0.5", "limiter_failure_policy": "fail_open",
        "speed_floor_output_tps": 1, "ttft_ceiling_ms": 1}).status_code == 403
    assert support_console.post(f"/admin/console/pools/{pool.pk}/admission/", {
        "auto_admit": "on", "quota_auto_approve_max_tps": 1}).status_code == 403
    assert not PoolAdmission.objects.exists()
    pool.refresh_from_db()
    assert pool.limiter_failure_policy == "fail_closed"
