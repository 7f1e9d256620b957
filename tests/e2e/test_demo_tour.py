"""Every main page of both sites, on the demo data (manage.py seed_demo), as a new user meets
them: each is saved at 1366 px and 390 px (artifacts/screenshots/), must fit a phone's width and
pass an axe-core scan (no serious or critical violation); and what a reader trips on is
checked where it would show: charts, numbers, figures that appear twice, the speed panels,
confirmations, messages, forms, the demo's life."""

import re
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.utils import timezone
from playwright.sync_api import expect

from billing.models import Invoice
from console.management.commands.seed_demo import DEMO_PASSWORD, OPERATOR_EMAIL, OWNER_EMAIL
from orgs.models import ApiKey, Organization, OrgStatus, Role
from quotas.limiter.state import limiter_org_guarantee
from quotas.models import Booking, GatewayToken
from rollout.models import QuotaRequest, RolloutWave
from rollout.quota_requests import quota_request_create
from tests.e2e.conftest import main_page, screenshot
from tests.factories import PASSWORD, MembershipFactory, UserFactory
from tests.totp import totp_code, totp_device_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def demo(site, settings):
    settings.DEBUG = True  # seed_demo runs in development only
    call_command("seed_demo")
    settings.DEBUG = False
    return site


def _operator_signs_in(page):
    operator = get_user_model().objects.get(username=OPERATOR_EMAIL)
    device = totp_device_for(operator)
    page.goto("/admin/")
    main_page(page, "console-login")
    page.get_by_label("Email").fill(OPERATOR_EMAIL)
    page.get_by_label("Password").fill(DEMO_PASSWORD)
    page.get_by_label("Authentication code").fill(totp_code(device))
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Dashboard")).to_be_visible()


def _nav(page, name: str):
    page.get_by_role("navigation", name="Main").get_by_role("link", name=name, exact=True).click()


def _dashboard(page):
    main_page(page, "console-dashboard")
    # The header keeps its pages on one line at 1366 px, the account on the row above.
    nav = page.locator(".site-nav .nav").bounding_box()
    link = page.locator(".site-nav .nav a").first.bounding_box()
    assert nav["height"] < 2 * link["height"]
    # Charts: drawn by uPlot over a UTC axis; hovering shows the value with its unit.
    hour = page.locator("[data-chart$='-hour']").first
    expect(hour.locator("canvas")).to_have_count(1)
    expect(hour.locator(".u-axis")).to_have_count(2)
    box = hour.locator(".u-over").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.8, box["y"] + box["height"] / 2)
    expect(hour.locator(".u-legend .u-series").nth(1)).to_contain_text("tokens/s")
    expect(hour.locator(".u-legend .u-series").first).to_contain_text("UTC")
    # The capacity lines far above the traffic are named, not drawn squashing it.
    expect(hour.locator(".chart-above").first).to_contain_text("above the scale")
    # Numbers with separators, counts as integers.
    expect(page.locator("[data-pool]").first).to_contain_text("121,000")
    assert not re.search(r"\b\d{4,}\.0 (requests|errors)", page.content())
    # The speed panel: every org in the pool against its guarantee, p50/p95 against floors.
    board = page.locator("[data-speed-pool]").first
    expect(board.locator("tr[data-speed-org]")).to_have_count(10)
    expect(board.locator("tr[data-speed-total]")).to_contain_text("Whole pool")
    expect(board.locator(".below-floor").first).to_be_visible()  # Harbor Health's slow tail
    # One figure, one value: approved orgs waiting = the "Approved (waitlisted)" row.
    approved = page.locator('[data-status-count="approved"] td.num').inner_text()
    expect(page.locator("[data-waitlist]")).to_have_text(approved)
    # The stock admin is a collapsed "raw data" section, not the way to work.
    expect(page.locator("details.raw-data")).not_to_have_attribute("open", "")


def _org_page(page):
    _nav(page, "Organizations")
    main_page(page, "console-orgs")
    page.get_by_role("link", name="Acme Voice").click()
    expect(page.locator("[data-chart='tokens'] canvas")).to_have_count(1)
    expect(page.locator("[data-org-speed] tr[data-speed-pool]")).to_have_count(1)
    main_page(page, "console-org")


def _vetting(page):
    _nav(page, "Vetting")
    main_page(page, "console-vetting")
    # Every organization has its application: nobody is missing from the queue.
    assert page.locator("[data-application]").count() == Organization.objects.count()
    page.get_by_role("link", name="Codewright").click()
    expect(page.locator("[data-score-reference]")).to_contain_text("Measured against")
    main_page(page, "console-application")


def _waves(page):
    _nav(page, "Waves")
    expect(page.locator(".card table [data-wave]").first).to_be_visible()  # in a card
    main_page(page, "console-waves")
    page.get_by_role("link", name="Wave 2").click()
    main_page(page, "console-wave")
    wave = RolloutWave.objects.get(name="Wave 2")
    page.once("dialog", lambda dialog: dialog.dismiss())  # "Open Wave 2 now?" - no
    page.get_by_role("button", name="Open now").click()
    expect(page.get_by_role("button", name="Open now")).to_be_visible()
    wave.refresh_from_db()
    assert wave.state == "scheduled"
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Open now").click()
    expect(page.locator("#actions .alert-success")).to_contain_text("Wave 2 is open:")
    expect(page.locator("#actions .alert-success")).not_to_contain_text("Wave Wave")
    expect(page.locator("[data-wave-when]")).to_contain_text("opened")
    expect(page.locator("[data-wave-when]")).not_to_contain_text("opens ")
    screenshot(page, "console-wave-opened")


def _quota_inbox(page):
    acme = Organization.objects.get(slug="acme-voice")
    allocation = acme.allocations.get(status="active")
    quota_request_create(org=acme, pool=allocation.pool, guaranteed_tps=20_000,
                         burst_tps=30_000, daily_tokens=900_000_000, max_concurrency=64,
                         reason="Launching in Europe", actor="test")
    _nav(page, "Quota requests")
    expect(page.locator(".card [data-quota-request]")).to_have_count(1)  # in a card
    reason = page.get_by_label(re.compile("Reason for denying request"))
    # The placeholder fits its input, not cut short ("Reason (shown t").
    assert reason.evaluate("""el => {
        const ctx = document.createElement("canvas").getContext("2d");
        const style = getComputedStyle(el);
        ctx.font = style.font;
        return ctx.measureText(el.placeholder).width <= el.clientWidth
               - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
    }""")
    main_page(page, "console-quota-inbox")
    reason.fill("No room before the next wave")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Deny").click()
    expect(page.locator("#requests .alert-success")).to_contain_text("denied")
    assert QuotaRequest.objects.get(org=acme).status == "denied"


def _prices_and_tokens(page):
    _nav(page, "Pools")
    main_page(page, "console-pools")
    _nav(page, "Price book")
    in_force = page.locator('[data-state="in force"]')
    expect(in_force).to_have_count(1)
    expect(in_force).to_contain_text("$7.5 / Mtok")  # the demo's fast-tier premium
    main_page(page, "console-prices")
    _nav(page, "Gateway tokens")
    main_page(page, "console-gateway-tokens")
    page.get_by_label("Gateway name").fill("edge eu-west 1")
    page.get_by_role("button", name="Create token").click()
    secret = page.locator("[data-token-created] [data-secret]").inner_text()
    token = GatewayToken.objects.get(name="edge eu-west 1")
    assert secret.startswith(f"gw_{token.lookup}_")
    main_page(page, "console-gateway-token-created")
    _nav(page, "Gateway tokens")
    assert secret not in page.content()  # shown once
    row = page.locator(f'[data-gateway-token="{token.lookup}"]')
    page.once("dialog", lambda dialog: dialog.accept())
    row.get_by_role("button", name="Revoke edge eu-west 1").click()
    expect(page.locator("#tokens .alert-success")).to_contain_text("revoked")
    expect(row).to_contain_text("Revoked")
    _nav(page, "Billing problems")
    main_page(page, "console-billing-problems")
    _nav(page, "Audit log")
    main_page(page, "console-audit")


def _calendar(page):
    _nav(page, "Pools")
    page.get_by_role("link", name="Calendar: guarantees, bookings and free capacity").click()
    booking = Booking.objects.filter(org__slug="acme-voice", state="confirmed").get()
    expect(page.locator(f"[data-booking='{booking.pk}']")).to_contain_text("Acme Voice")
    expect(page.locator("[data-chart^='calendar'] canvas")).to_have_count(1)
    main_page(page, "console-pool-calendar-demo")
    _nav(page, "Bookings")
    main_page(page, "console-bookings-demo")


def test_console_tour(demo, new_page):
    page = new_page()
    _operator_signs_in(page)
    _dashboard(page)
    _org_page(page)
    _vetting(page)
    _waves(page)
    _quota_inbox(page)
    _prices_and_tokens(page)
    _calendar(page)


def _signs_in(page, email: str, password: str):
    page.goto("/portal/login/")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("[data-status]").first).to_be_visible()


def test_landing_and_portal_tour(demo, new_page):
    page = new_page()
    page.goto("/")
    for name, href in [("Portal", "/portal/"), ("Console", "/admin/"), ("API", "/api/docs/")]:
        expect(page.get_by_role("link", name=name, exact=True)).to_have_attribute("href", href)
    main_page(page, "landing")
    assert page.request.get("/favicon.ico").status == 200
    page.goto("/portal/signup/")
    main_page(page, "portal-signup")
    page.goto("/portal/login/")
    main_page(page, "portal-login")

    _signs_in(page, OWNER_EMAIL, DEMO_PASSWORD)
    # An active org's application reads as admitted, not as still waitlisted.
    expect(page.locator("[data-application-state]")).to_have_text("Admitted")
    main_page(page, "portal-status")
    _nav(page, "Members")
    main_page(page, "portal-members")
    # The only owner cannot leave: asked first, refused, and told here, not on another page.
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Leave Acme Voice").click()
    expect(page).to_have_url(re.compile(r"/members/#members$"))
    expect(page.locator("#members .alert-error")).to_contain_text("owner")

    _nav(page, "API keys")
    # The demo owner's address is confirmed: a key can be made at once.
    page.get_by_label("Key name").fill("demo laptop")
    page.get_by_role("button", name="Create key").click()
    expect(page.locator("[data-secret]")).to_contain_text("sk_")
    main_page(page, "portal-keys")
    _nav(page, "Quotas")
    expect(page.locator('[data-field="guaranteed_tps"]')).to_contain_text("12,000")
    # The window in force: what the limiter admits now, the allocation plus the booking.
    expect(page.locator('[data-field="booked_tps"]')).to_contain_text("16,000 tokens/s")
    main_page(page, "portal-quotas")
    _nav(page, "Usage")
    expect(page.locator("[data-chart='hour-tps'] canvas")).to_have_count(1)
    hour_tokens = page.locator('[data-field="hour_tokens"]').inner_text()
    assert re.fullmatch(r"\d{1,3}(,\d{3})+", hour_tokens), hour_tokens  # a month of demo
    expect(page.locator("[data-speed-keys] tbody tr").first).to_contain_text("Production app")
    main_page(page, "portal-usage")
    _nav(page, "Ask for more")
    main_page(page, "portal-quota-requests")
    _nav(page, "Billing")
    last_month = Invoice.objects.get(org__slug="acme-voice")
    expect(page.locator(f'tr[data-invoice="{last_month.number}"]')).to_be_visible()
    expect(page.locator('tr[data-kind="premium_output"]')).to_be_visible()
    expect(page.locator('tr[data-kind="speed_credit"]')).to_be_visible()
    main_page(page, "portal-billing")
    _books_a_window(page)


def _books_a_window(page):
    """The demo owner books a window on the portal; it takes its place beside the demo's."""
    _nav(page, "Book capacity")
    acme = Organization.objects.get(slug="acme-voice")
    expect(page.locator("[data-booking]")).to_have_count(3)  # last month's, in force, ahead
    page.locator("a[data-pool]").first.click()
    expect(page.locator("figure[data-chart='free'] canvas")).to_have_count(1)
    start = (timezone.now() + timedelta(days=2)).replace(hour=16, minute=0, second=0,
                                                         microsecond=0)
    page.get_by_label("Starts (UTC)").fill(start.strftime("%Y-%m-%dT%H:%M"))
    page.get_by_label("Ends (UTC)").fill((start + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M"))
    page.get_by_label("Extra guaranteed output tokens/s").fill("4000")
    page.get_by_role("button", name="Get a quote").click()
    expect(page.locator("[data-quote-amount]")).to_have_text("$160.00")
    page.get_by_role("button", name=re.compile("Confirm the booking")).click()
    booking = Booking.objects.get(org=acme, starts_at=start)
    expect(page.locator(f"[data-booking='{booking.pk}'] [data-state]")).to_have_text(
        "Confirmed")


def test_portal_before_admission(demo, new_page):
    """A waitlisted org sees where it stands and what comes next, not empty forms and zeroed
    charts; an org filling in its application picks its country and region from lists."""
    user = UserFactory(username="cto@codewright.test", email="cto@codewright.test")
    MembershipFactory(org=Organization.objects.get(slug="seed-codewright"), user=user,
                      role=Role.OWNER)
    page = new_page()
    _signs_in(page, user.username, PASSWORD)
    expect(page.locator('[data-field="position"]')).to_be_visible()
    main_page(page, "portal-status-waitlisted")
    for nav, name in [("Quotas", "portal-quotas-before-admission"),
                      ("Usage", "portal-usage-before-admission"),
                      ("Ask for more", "portal-quota-requests-before-admission")]:
        _nav(page, nav)
        expect(page.locator("[data-not-admitted]")).to_contain_text("not admitted yet")
        expect(page.locator("[data-not-admitted] [data-field='position']")).to_be_visible()
        expect(page.locator("canvas")).to_have_count(0)
        expect(page.locator("form[action$='/quota-requests/new/']")).to_have_count(0)
        main_page(page, name)

    fresh = Organization.objects.create(name="Fresh Voice", slug="fresh-voice",
                                        status=OrgStatus.APPLIED)
    MembershipFactory(org=fresh, user=user, role=Role.OWNER)
    page.goto("/portal/o/fresh-voice/application/")
    country = page.get_by_label("Country")
    country.select_option(label="Germany")
    expect(country).to_have_value("DE")
    region = page.get_by_label("Preferred region")
    assert region.locator("option").all_inner_texts() == ["us-east"]
    website = page.get_by_label("Website")
    legal = page.get_by_label("Legal name")
    for css in ("border-top-color", "border-radius", "padding-left"):
        assert website.evaluate(f"el => getComputedStyle(el)['{css}']") == legal.evaluate(
            f"el => getComputedStyle(el)['{css}']"), css
    main_page(page, "portal-application")
    assert not ApiKey.objects.filter(org=fresh).exists()


def test_demo_is_alive_after_seeding(demo):
    """What the tours rely on: prices with a premium, a month of history closed into
    invoices, usage in the last hour, and a confirmed owner."""
    acme = Organization.objects.get(slug="acme-voice")
    assert Invoice.objects.filter(org=acme).count() == 1
    from metering.models import UsageEvent, UsageHourly

    now = timezone.now()
    assert UsageEvent.objects.filter(org=acme, started_at__gte=now - timedelta(hours=1)).exists()
    assert UsageHourly.objects.filter(org=acme, hour__lt=now - timedelta(days=28)).exists()
    owner = get_user_model().objects.get(username=OWNER_EMAIL)
    assert owner.verified_emails.filter(email=OWNER_EMAIL).exists()
    # Bookings: last month's window is a line of last month's invoice; one is ahead.
    invoice = Invoice.objects.get(org=acme)
    assert invoice.lines.filter(kind="booking", booking__state="ended").count() == 1
    assert Booking.objects.filter(org=acme, state="confirmed", starts_at__gt=now).count() == 1
    assert Booking.objects.filter(state="confirmed").count() == 3
    # One is in force: the limiter admits Acme Voice's allocation plus it, now.
    in_force = Booking.objects.get(org=acme, state="active")
    assert in_force.starts_at <= now < in_force.ends_at
    allocation = acme.allocations.get(pool=in_force.pool, status="active")
    assert limiter_org_guarantee(pool_id=in_force.pool_id, org_id=acme.pk, at=now).output_tps \
        == allocation.guaranteed_tps + in_force.output_tps
