"""The operator's rollout journey in a real browser: sign in with TOTP, approve an application
from the vetting queue, plan and open a wave, then work the quota-increase inbox (one request
fits, one does not). Screenshots of each console page go to artifacts/screenshots/."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import Group, Permission
from django.utils import timezone
from playwright.sync_api import expect

from billing.models import OutboxMessage, OutboxStatus, PriceVersion
from console.permissions import groups_sync
from metering.models import UsageEvent, UsageHourly
from orgs.models import OrgStatus
from quotas.models import Allocation
from rollout.models import Application, PoolAdmission, QuotaRequest
from rollout.quota_requests import quota_request_create
from tests.e2e.conftest import main_page, screenshot
from tests.factories import (
    PASSWORD,
    AllocationFactory,
    OrganizationFactory,
    PoolFactory,
    UserFactory,
)
from tests.totp import totp_code, totp_device_for
from tests.waitlist import applicant_org, submit

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _operator():
    groups_sync(group_model=Group, permission_model=Permission)  # transactional: groups flushed
    user = UserFactory(username="ops@sluice.dev", is_staff=True)
    user.groups.add(Group.objects.get(name="operator"))
    return user, totp_device_for(user)


def _signs_in(page, user, device):
    page.goto("/admin/")
    page.get_by_label("Email").fill(user.username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_label("Authentication code").fill(totp_code(device))
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Dashboard")).to_be_visible()


def _approves_from_the_vetting_queue(page, app):
    page.get_by_role("link", name="Vetting", exact=True).click()
    expect(page.get_by_role("heading", name="Vetting queue")).to_be_visible()
    screenshot(page, "console-vetting-queue")
    page.get_by_role("link", name=app.org.name).click()
    for _ in range(3):  # identity, use case, contact; the payment method is billing's
        page.get_by_role("button", name="Tick", exact=True).first.click()
        expect(page.locator(".alert-success")).to_contain_text("Checklist updated")
    page.get_by_label("Internal reason (audit log)").fill("Real-time voice, verified")
    page.get_by_role("button", name="Approve", exact=True).click()
    screenshot(page, "console-application")
    expect(page.locator("[data-state]")).to_have_text("Approved (waitlisted)")
    screenshot(page, "console-application")


def _plans_and_opens_a_wave(page, pool, org):
    page.get_by_role("link", name="Waves", exact=True).click()
    page.get_by_label("Pool").select_option(str(pool.pk))
    for label, value in [("Name", "GA wave 1"), ("Opens at (UTC)", "2030-01-01T10:00"),
                         ("Capacity added, tokens/s", "1000"), ("Maximum organizations", "5"),
                         ("Default guaranteed tokens/s", "500"),
                         ("Default burst tokens/s", "800"), ("Default daily tokens", "1000000"),
                         ("Default concurrent requests", "8")]:
        page.get_by_label(label, exact=True).fill(value)
    screenshot(page, "console-waves")
    page.get_by_role("button", name="Schedule").click()
    expect(page.get_by_role("heading", name="Planner: if it opened now")).to_be_visible()
    expect(page.locator(f"[data-admit='{org.pk}']")).to_contain_text(org.name)
    screenshot(page, "console-wave-planner")
    page.once("dialog", lambda dialog: dialog.accept())  # "Open GA wave 1 now?"
    page.get_by_role("button", name="Open now").click()
    expect(page.locator(".alert-success")).to_contain_text("1 organization admitted")


def _works_the_quota_inbox(page, fits, too_big):
    page.get_by_role("link", name="Quota requests", exact=True).click()
    page.locator(f"[data-quota-request='{too_big.pk}']").get_by_role("button",
                                                                    name="Approve").click()
    expect(page.locator(".alert-error")).to_contain_text("cannot guarantee")
    screenshot(page, "console-quota-inbox-capacity-error")
    page.locator(f"[data-quota-request='{fits.pk}']").get_by_role("button",
                                                                 name="Approve").click()
    expect(page.locator(".alert-success")).to_contain_text(f"Request #{fits.pk}")
    expect(page.locator(f"[data-quota-request='{fits.pk}']")).to_have_count(0)
    screenshot(page, "console-quota-inbox")


def test_operator_vets_opens_a_wave_and_approves_a_quota_increase(new_page):
    pool = PoolFactory(region="us-east", capacity_tps=1_000)  # 900 guaranteeable, 1,800 after
    big = OrganizationFactory(name="Big Co", status=OrgStatus.ACTIVE)
    AllocationFactory(org=big, pool=pool, guaranteed_tps=200, burst_tps=400)
    org, owner = applicant_org("Voice Co")
    app = submit(org, owner)
    user, device = _operator()
    page = new_page()

    _signs_in(page, user, device)
    _approves_from_the_vetting_queue(page, app)
    assert Application.objects.get(pk=app.pk).state == "approved"
    _plans_and_opens_a_wave(page, pool, org)
    assert Allocation.objects.get(org=org, pool=pool).guaranteed_tps == 500
    org.refresh_from_db()  # admitted by the wave

    # 200 + 500 guaranteed of 1,800: Voice Co to 1,000 fits; Big Co to 1,500 would not.
    too_big = quota_request_create(org=big, pool=pool, guaranteed_tps=1_500, burst_tps=1_500,
                                   daily_tokens=50_000_000, max_concurrency=20,
                                   reason="launch", actor="test")
    fits = quota_request_create(org=org, pool=pool, guaranteed_tps=1_000, burst_tps=1_200,
                                daily_tokens=50_000_000, max_concurrency=20,
                                reason="more users", actor="test")
    _works_the_quota_inbox(page, fits, too_big)
    assert Allocation.objects.get(org=org, pool=pool, status="active").guaranteed_tps == 1_000
    assert QuotaRequest.objects.get(pk=too_big.pk).status == "pending"
    page.get_by_role("link", name="Dashboard", exact=True).click()
    screenshot(page, "console-dashboard-rollout")


def _usage(org, pool):
    """An hour of traffic in the rollups and a few minutes of raw events, for the charts."""
    now = timezone.now()
    for hours_ago in range(0, 24, 3):
        UsageHourly.objects.create(
            org=org, pool=pool, hour=now.replace(minute=0, second=0, microsecond=0)
            - timedelta(hours=hours_ago), requests=40 + hours_ago, errors=hours_ago % 4,
            input_tokens=20_000, output_tokens=90_000 + 5_000 * hours_ago,
            ttft_ms_total=12_000, ttft_count=40, decode_ms_total=150_000)
    for i in range(12):
        finished = now - timedelta(minutes=5 * i + 1)
        UsageEvent.objects.create(
            request_id=f"e2e-{i}", org=org, pool=pool, status="completed",
            input_tokens=30_000, output_tokens=60_000 + 10_000 * i,
            started_at=finished - timedelta(seconds=2), finished_at=finished)


def test_operator_sees_live_use_sets_prices_and_pool_settings(new_page):
    pool = PoolFactory(region="us-east", capacity_tps=1_000)
    org = OrganizationFactory(name="Live Co", status=OrgStatus.ACTIVE)
    AllocationFactory(org=org, pool=pool, guaranteed_tps=400, burst_tps=800)
    _usage(org, pool)
    OutboxMessage.objects.create(kind="customer_sync", org=org, status=OutboxStatus.DEAD,
                                 attempts=8, last_error="Stripe unreachable")
    user, device = _operator()
    page = new_page()
    _signs_in(page, user, device)
    expect(page.locator("[data-live='hour']")).to_contain_text("tokens/s average")
    screenshot(page, "console-dashboard-live")

    page.get_by_role("link", name="Organizations", exact=True).click()
    page.get_by_role("link", name="Live Co").click()
    expect(page.locator("[data-chart='tokens']")).to_be_visible()
    screenshot(page, "console-org-usage")

    page.get_by_role("link", name="Pools", exact=True).click()
    page.get_by_label("When Redis is unreachable").select_option("fail_open")
    page.get_by_role("button", name="Save settings").click()
    expect(page.locator(".alert-success")).to_contain_text("Settings of")
    page.get_by_label("Auto-approve guaranteed tokens/s growth up to").fill("200")
    page.get_by_label("Auto-approve burst tokens/s growth up to").fill("400")
    page.get_by_role("button", name="Save admission").click()
    expect(page.locator(".alert-success")).to_contain_text("Admission settings")
    screenshot(page, "console-pools-settings")

    page.get_by_role("link", name="Price book", exact=True).click()
    start = (timezone.now() + timedelta(hours=3)).strftime("%Y-%m-%dT%H:00")
    page.get_by_label("Pool").select_option(str(pool.pk))
    page.get_by_label("Effective from (UTC, a whole hour)").fill(start)
    page.get_by_label("Input, $ per million tokens", exact=True).fill("5")
    page.get_by_label("Output, $ per million tokens", exact=True).fill("30")
    page.get_by_label("Fast-tier premium on output, $ per million tokens").fill("6")
    page.get_by_role("button", name="Add version").click()
    expect(page.locator(f"[data-pool='{pool.pk}']")).to_contain_text("$30 / Mtok")
    screenshot(page, "console-price-book")

    page.get_by_role("link", name="Billing problems", exact=True).click()
    page.get_by_role("button", name="Retry").click()
    expect(page.locator(".alert-success")).to_contain_text("queued again")
    screenshot(page, "console-billing-problems")
    pool.refresh_from_db()
    assert pool.limiter_failure_policy == "fail_open"
    rules = PoolAdmission.objects.get(pool=pool)
    assert (rules.quota_auto_approve_max_tps, rules.quota_auto_approve_max_burst_tps) == (200, 400)
    assert PriceVersion.objects.filter(pool=pool, output_micros_per_mtok=30_000_000).exists()


def test_operator_bills_a_paid_months_late_usage_from_the_invoice_list(new_page):
    """Usage of a paid month reported after the close: the operator selects the invoice in the
    console's invoice list and runs "bill late usage"; the org's page shows the supplement."""
    from datetime import UTC, date, datetime

    from billing.models import Invoice
    from billing.services import invoice_close_month, invoice_paid

    pool = PoolFactory(region="us-east")
    org = OrganizationFactory(name="Late Co", status=OrgStatus.ACTIVE)
    hour = {"org": org, "pool": pool, "requests": 1, "input_tokens": 1_000_000,
            "output_tokens": 100_000, "premium_input_tokens": 1_000_000,
            "premium_output_tokens": 100_000}
    UsageHourly.objects.create(hour=datetime(2026, 10, 5, tzinfo=UTC), **hour)
    main = invoice_close_month(org=org, month=date(2026, 10, 1), actor="test",
                               now=datetime(2026, 11, 2, tzinfo=UTC))[0]
    invoice_paid(invoice=main)
    UsageHourly.objects.create(hour=datetime(2026, 10, 31, 23, tzinfo=UTC), **hour)
    user, device = _operator()
    page = new_page()
    _signs_in(page, user, device)

    page.goto("/admin/billing/invoice/")
    page.locator(f"input[name='_selected_action'][value='{main.pk}']").check()
    page.locator("select[name='action']").select_option("bill_late_usage")
    page.get_by_role("button", name="Go").click()
    expect(page.locator(".alert-success, .messagelist .success").first).to_contain_text(
        "Supplements of late usage issued: 1.")
    supplement = Invoice.objects.get(supplements=main)
    assert supplement.total_cents == main.total_cents
    screenshot(page, "console-invoices-late-usage")

    page.goto(f"/admin/console/orgs/{org.pk}/")
    expect(page.locator(f"[data-supplements='{main.number}']")).to_contain_text(
        f"late usage of {main.number}")
    page.get_by_role("link", name=supplement.number).click()
    expect(page.locator(f"[data-supplements='{main.number}']")).to_contain_text(
        "billed in addition to it")


def test_operator_sees_each_pools_admission_queue_waits(new_page):
    """Ten requests admitted after waiting 100, 200, ... 1,000 ms in the last hour, and one
    that did not wait: the pool's card says p50 550 ms and p95 955 ms (PostgreSQL's
    percentile_cont), and charts them per 5 minutes against the pool's longest wait."""
    pool = PoolFactory(region="eu-west", capacity_tps=1_000, queue_max_wait_ms=10_000)
    org = OrganizationFactory(name="Queue Co", status=OrgStatus.ACTIVE)
    AllocationFactory(org=org, pool=pool, guaranteed_tps=400, burst_tps=800)
    now = timezone.now()
    for i in range(11):
        finished = now - timedelta(minutes=2 + i)
        UsageEvent.objects.create(
            request_id=f"waited-{i}", org=org, pool=pool, status="completed",
            input_tokens=100, output_tokens=200, started_at=finished - timedelta(seconds=2),
            finished_at=finished, queued_ms=None if i == 10 else 100 * (i + 1))
    user, device = _operator()
    page = new_page()
    _signs_in(page, user, device)
    card = page.locator(f"[data-pool='{pool.pk}']")
    figures = card.locator("[data-field='queue-wait']")
    expect(figures).to_have_text("550 ms p50, 955 ms p95, of 10 requests admitted after waiting")
    chart = card.locator(f"[data-chart='pool{pool.pk}-wait']")
    expect(chart).to_be_visible()
    expect(chart.locator("canvas, svg").first).to_be_visible()  # drawn (static/charts.js)
    expect(chart.locator("[data-limit='Longest wait']")).to_contain_text("10,000")
    main_page(page, "console-dashboard-queue-wait")
