"""The main journeys, end to end in a real browser. Each leaves screenshots of the pages it
passes through in artifacts/screenshots/."""

import re

import pytest
from django.core import mail
from playwright.sync_api import expect

from orgs.models import ApiKey, Organization, OrgStatus, Role
from quotas.models import Allocation
from tests.e2e.conftest import main_page, screenshot
from tests.factories import PASSWORD, MembershipFactory, OperatorFactory, PoolFactory, UserFactory
from tests.totp import totp_code_from_secret

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

OWNER_PASSWORD = "violet-harbour-1987"


def _link_in_last_mail() -> str:
    return re.search(r"https?://\S+", mail.outbox[-1].body).group(0)


def _owner_signs_up(page) -> Organization:
    page.goto("/portal/signup/")
    screenshot(page, "portal-signup")
    page.get_by_label("Organization name").fill("Voice Co")
    page.get_by_label("Work email").fill("ada@voice.test")
    page.get_by_label("Password").fill(OWNER_PASSWORD)
    page.get_by_role("button", name="Create account and apply").click()
    expect(page.locator("[data-status]")).to_have_text("Applied")
    screenshot(page, "portal-status-applied")
    page.goto(_link_in_last_mail())
    expect(page.get_by_role("heading", name="Email confirmed")).to_be_visible()
    return Organization.objects.get(name="Voice Co")


def _operator_signs_in_with_totp(page):
    operator = OperatorFactory(username="ops@sluice.dev", email="ops@sluice.dev")
    page.goto("/admin/")
    screenshot(page, "console-login")
    page.get_by_label("Email").fill(operator.username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Set up two-factor authentication")).to_be_visible()
    expect(page.locator(".qr svg")).to_be_visible()
    main_page(page, "console-totp-enroll")
    secret = page.locator("[data-totp-secret]").inner_text()
    page.get_by_label("Code from your authenticator app").fill(totp_code_from_secret(secret))
    page.get_by_role("button", name="Confirm").click()
    expect(page.get_by_role("heading", name="Dashboard")).to_be_visible()


def _operator_admits_and_grants(page, org, pool):
    page.get_by_role("link", name="Organizations", exact=True).click()
    page.get_by_role("link", name=org.name).click()
    for button, state in [("Start review", "in_review"), ("Approve", "approved"),
                          ("Admit", "active")]:
        page.get_by_role("button", name=button).click()
        expect(page.locator("h1 [data-status]")).to_have_attribute("data-status", state)
    page.get_by_text("Grant an allocation").click()  # the form is folded away until needed
    grant = page.locator("form", has=page.get_by_role("button", name="Grant"))
    grant.get_by_label("Pool").select_option(str(pool.pk))
    grant.get_by_label("Guaranteed tokens/s").fill("950")  # more than the 900 guaranteeable
    grant.get_by_label("Burst ceiling tokens/s").fill("1000")
    grant.get_by_label("Daily tokens").fill("10000000")
    grant.get_by_label("Concurrent requests").fill("8")
    grant.get_by_role("button", name="Grant").click()
    expect(page.get_by_role("alert")).to_contain_text("900 of 900 guaranteeable tokens/s are free")
    grant = page.locator("form", has=page.get_by_role("button", name="Grant"))
    grant.get_by_label("Guaranteed tokens/s").fill("600")
    grant.get_by_label("Burst ceiling tokens/s").fill("800")
    grant.get_by_role("button", name="Grant").click()
    expect(page.get_by_role("status")).to_contain_text("Allocation granted")
    screenshot(page, "console-org")
    page.get_by_role("link", name="Dashboard", exact=True).click()
    expect(page.locator(f'[data-pool="{pool.pk}"]')).to_contain_text("600 of 900")
    screenshot(page, "console-dashboard")
    page.get_by_role("link", name="Pools", exact=True).click()
    screenshot(page, "console-pools")
    page.get_by_role("link", name="Audit log", exact=True).click()
    expect(page.locator('[data-action="allocation.grant"]')).to_have_count(1)
    screenshot(page, "console-audit")


def _owner_creates_and_revokes_a_key(page, org):
    page.goto("/portal/")
    expect(page.locator("[data-status]")).to_have_text("Active")
    screenshot(page, "portal-status-active")
    page.get_by_role("link", name="Quotas", exact=True).click()
    expect(page.locator('[data-field="guaranteed_tps"]')).to_contain_text("600")
    screenshot(page, "portal-quotas")
    page.get_by_role("link", name="API keys", exact=True).click()
    page.get_by_label("Key name").fill("voice prod")
    page.get_by_role("button", name="Create key").click()  # htmx: the fragment swaps in
    secret = page.locator("[data-secret]").inner_text()
    key = ApiKey.objects.get(org=org, name="voice prod")
    assert secret.startswith(f"sk_{key.lookup}_")
    expect(page.get_by_role("button", name="Copy")).to_be_visible()
    expect(page.locator(f'#key-rows [data-key="{key.display_prefix}"]')).to_be_visible()
    expect(page.get_by_label("Key name")).to_have_value("")
    screenshot(page, "portal-key-created")
    page.reload()
    expect(page.locator("[data-secret]")).to_have_count(0)  # shown once
    assert secret not in page.content()
    page.once("dialog", lambda dialog: dialog.accept())  # hx-confirm
    page.get_by_role("button", name="Revoke voice prod").click()
    expect(page.locator(f'[data-key="{key.display_prefix}"]')).to_contain_text("Revoked")
    key.refresh_from_db()
    assert key.revoked_at is not None
    page.get_by_role("link", name="Members", exact=True).click()
    screenshot(page, "portal-members")


def test_signup_admission_allocation_and_key(new_page):
    pool = PoolFactory(model="frontier-1", capacity_tps=1000)  # 900 guaranteeable
    owner_page, operator_page = new_page(), new_page()
    org = _owner_signs_up(owner_page)
    _operator_signs_in_with_totp(operator_page)
    _operator_admits_and_grants(operator_page, org, pool)
    org.refresh_from_db()
    assert org.status == OrgStatus.ACTIVE
    assert Allocation.objects.get(org=org, pool=pool).guaranteed_tps == 600
    _owner_creates_and_revokes_a_key(owner_page, org)


def test_viewer_cannot_see_member_management(new_page):
    org = Organization.objects.create(name="Agents Ltd", slug="agents", status=OrgStatus.ACTIVE)
    viewer = UserFactory(username="viewer@agents.test")
    MembershipFactory(org=org, user=viewer, role=Role.VIEWER)
    page = new_page()
    page.goto("/portal/login/")
    screenshot(page, "portal-login")
    page.get_by_label("Email").fill(viewer.username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Agents Ltd")).to_be_visible()
    nav = page.get_by_role("navigation", name="Main")
    expect(nav.get_by_role("link", name="Status", exact=True)).to_be_visible()
    expect(nav.get_by_role("link", name="Members", exact=True)).to_have_count(0)
    page.get_by_role("link", name="API keys", exact=True).click()
    expect(page.get_by_role("heading", name="Create a key")).to_have_count(0)
    page.set_viewport_size({"width": 390, "height": 844})  # the layout holds on a phone
    screenshot(page, "portal-keys-mobile")
    response = page.goto("/portal/o/agents/members/")
    assert response.status == 403
    expect(page.get_by_role("heading", name="Not allowed")).to_be_visible()
