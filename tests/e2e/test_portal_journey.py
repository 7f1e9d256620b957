"""The org's side end to end in a real browser: sign up, fill in the application, wait on the
waitlist, get admitted by a wave, create a key, send traffic through the real gateway hook over
HTTP, watch it on the usage page, ask for more, and find the month's invoice on the billing
page. Operator steps go through the same services the console calls."""

import re
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from django.core import mail
from django.utils import timezone
from playwright.sync_api import expect

from billing.models import PriceVersion
from billing.periods import month_after, month_of
from billing.services import invoice_close_month
from orgs.models import Organization, OrgStatus, Role
from quotas.hook.gateway_tokens import gateway_token_cache_clear, gateway_token_create
from quotas.hook.routing import pool_routes_reload
from quotas.limiter.connection import limiter_reset
from rollout.applications import application_decide
from rollout.models import Application, RolloutWave
from rollout.waves import waves_open_due
from tests.e2e.conftest import screenshot
from tests.factories import (
    PASSWORD,
    MembershipFactory,
    OperatorFactory,
    OrganizationFactory,
    PoolFactory,
    RolloutWaveFactory,
    UserFactory,
)
from tests.waitlist import tick_required

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

OWNER_PASSWORD = "violet-harbour-1987"


def _signs_up(page) -> Organization:
    page.goto("/portal/signup/")
    page.get_by_label("Organization name").fill("Voice Co")
    page.get_by_label("Work email").fill("ada@voice.test")
    page.get_by_label("Password").fill(OWNER_PASSWORD)
    page.get_by_role("button", name="Create account and apply").click()
    expect(page.locator("[data-status]")).to_have_text("Applied")
    page.goto(re.search(r"https?://\S+", mail.outbox[-1].body).group(0))  # confirm the email
    return Organization.objects.get(name="Voice Co")


def _applies(page, org):
    page.goto(f"/portal/o/{org.slug}/")
    page.get_by_role("link", name="Fill in the application").click()
    answers = {"Legal name": "Voice Co Ltd", "Website": "voice dot test",
               "Contact name": "Ada", "Contact email": "ada@voice.test",
               "Use case description": "Real-time phone agents.",
               "Expected peak tokens/s": "400", "Expected daily tokens": "20000000"}
    for label, value in answers.items():
        page.get_by_label(label, exact=True).fill(value)
    # Country and region are lists: ISO countries, and the regions the pools serve.
    page.get_by_label("Country").select_option(label="Germany")
    page.get_by_label("Preferred region").select_option("eu-west")
    page.get_by_label("Use case", exact=True).select_option("voice")
    page.get_by_label("Latency sensitivity").select_option("realtime")
    page.get_by_role("button", name="Submit application").click()
    expect(page.locator(".errorlist")).to_contain_text("Enter a valid URL")
    expect(page.get_by_label("Country")).to_have_value("DE")  # kept, not truncated
    screenshot(page, "portal-application-errors")
    page.get_by_label("Website").fill("https://voice.test")
    page.get_by_role("button", name="Submit application").click()
    expect(page.locator("[data-application-state]")).to_have_text("Submitted")


def _approved_and_admitted(page, org, pool):
    operator = OperatorFactory()
    application = Application.objects.get(org=org)
    tick_required(application, operator)
    page.reload()
    expect(page.locator('[data-check="identity_verified"]')).to_have_class("done")
    application_decide(application=application, decision="approve", reason="fits",
                       actor=operator)
    RolloutWaveFactory(pool=pool, name="Wave 1", opens_at=timezone.now() + timedelta(days=2),
                       guaranteed_tps=500, burst_tps=1_000, daily_tokens=10_000_000)
    page.reload()
    expect(page.locator('[data-field="position"]')).to_contain_text("1")
    expect(page.locator('[data-field="estimate"]')).to_contain_text("Wave 1")
    screenshot(page, "portal-status-waitlist")
    RolloutWave.objects.filter(pool=pool).update(
        opens_at=timezone.now() - timedelta(minutes=1))
    assert waves_open_due() == 1
    page.reload()
    expect(page.locator("[data-status]").first).to_have_text("Active")


def _creates_key(page, org) -> str:
    page.get_by_role("link", name="API keys").click()
    page.get_by_label("Key name").fill("phone agent")
    page.get_by_role("button", name="Create key").click()
    return page.locator("[data-secret]").inner_text()


def _sends_traffic(hook_url, pool, api_key: str) -> None:
    """Through the gateway hook over real HTTP, as an edge gateway would (the production
    application: it answers the hook on its event loop)."""
    limiter_reset()
    gateway_token_cache_clear()
    pool_routes_reload()
    _, token = gateway_token_create(name="edge-e2e", actor="test")
    gateway = httpx.Client(base_url=hook_url, headers={"Authorization": f"Bearer {token}"})
    now = timezone.now()
    for i in range(3):
        decision = gateway.post("/api/gateway/v1/authorize", json={
            "request_id": f"e2e-{i}", "api_key": api_key, "model": pool.model,
            "input_tokens": 120, "max_output_tokens": 400})
        assert decision.status_code == 200 and decision.json()["allowed"], decision.text
        usage = gateway.post("/api/gateway/v1/usage", json={
            "request_id": f"e2e-{i}", "reservation_id": decision.json()["reservation_id"],
            "input_tokens": 120, "output_tokens": 380, "status": "completed",
            "started_at": (now - timedelta(seconds=2)).isoformat(),
            "first_token_at": (now - timedelta(seconds=1)).isoformat(),
            "finished_at": now.isoformat()})
        assert usage.status_code == 200, usage.text


def test_org_journey_from_application_to_invoice(new_page, site, served_url, redis_client):
    pool = PoolFactory(model="frontier-fast", region="eu-west", tier="fast", capacity_tps=5_000)
    PriceVersion.objects.create(
        pool=pool, effective_from=datetime(2026, 1, 1, tzinfo=UTC),
        input_micros_per_mtok=5_000_000, output_micros_per_mtok=30_000_000,
        premium_input_micros_per_mtok=2_000_000, premium_output_micros_per_mtok=10_000_000)
    page = new_page()
    org = _signs_up(page)
    _applies(page, org)
    screenshot(page, "portal-status-application-submitted")
    _approved_and_admitted(page, org, pool)
    api_key = _creates_key(page, org)
    _sends_traffic(served_url, pool, api_key)

    page.get_by_role("link", name="Usage").click()
    expect(page.locator('[data-field="hour_tokens"]')).to_have_text("1,500")
    hour = page.evaluate("JSON.parse(document.getElementById('chart-hour-tps-data').textContent)")
    assert sum(hour["series"][0]["values"]) == 25.0  # 1,500 tokens in a minute
    expect(page.locator('[data-limit="Guaranteed"]').first).to_have_attribute("data-value", "500")
    expect(page.locator("tr[data-key]")).to_contain_text("phone agent")
    screenshot(page, "portal-usage")

    page.get_by_role("link", name="Ask for more").click()
    page.get_by_label("Pool").select_option(str(pool.pk))
    for label, value in {"Guaranteed tokens/s": "800", "Burst tokens/s": "1200",
                         "Daily tokens": "30000000", "Concurrent requests": "32",
                         "Why you need it": "Launching in Spain"}.items():
        page.get_by_label(label).fill(value)
    page.get_by_role("button", name="Send the request").click()
    expect(page.locator("[data-request] [data-status]").first).to_be_visible()
    screenshot(page, "portal-quota-requests")

    month = month_of(timezone.now())
    invoice, _ = invoice_close_month(org=org, month=month, actor=OperatorFactory(),
                                     now=datetime.combine(month_after(month), datetime.min.time(),
                                                          tzinfo=UTC) + timedelta(hours=1))
    page.get_by_role("link", name="Billing").click()
    row = page.locator(f'tr[data-invoice="{invoice.number}"]')
    expect(row).to_be_visible()
    screenshot(page, "portal-billing")
    with page.expect_download() as download:
        row.get_by_role("link", name="PDF").click()
    assert download.value.suggested_filename == f"{invoice.number}.pdf"
    row.get_by_role("link", name="View").click()
    expect(page.get_by_text(invoice.number).first).to_be_visible()
    screenshot(page, "portal-invoice")


@pytest.mark.parametrize("role", [Role.DEVELOPER, Role.VIEWER])
def test_member_without_billing_role_cannot_see_billing(new_page, site, role):
    org = OrganizationFactory(name="Busy Co", status=OrgStatus.ACTIVE)
    user = UserFactory(email=f"{role}@busy.test", username=f"{role}@busy.test")
    MembershipFactory(org=org, user=user, role=role)
    page = new_page()
    page.goto("/portal/login/")
    page.get_by_label("Email").fill(user.username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("link", name="Usage")).to_be_visible()
    expect(page.get_by_role("link", name="Billing")).to_have_count(0)
    response = page.goto(f"/portal/o/{org.slug}/billing/")
    assert response.status == 404
