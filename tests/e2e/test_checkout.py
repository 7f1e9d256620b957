"""Adding a payment method the way an owner does it: from the portal's billing page to the
local Stripe's Checkout page (setup mode), a test card, and back to the portal, which shows the
card on file once Stripe's signed webhook has arrived. The same production code talks to the
local Stripe over HTTP (tests/billing/conftest.py's server)."""

import httpx
import pytest
from playwright.sync_api import expect

from billing.models import StripeEvent
from orgs.models import OrgStatus, Role
from tests.billing.conftest import API_KEY, WEBHOOK_SECRET, StripeServer
from tests.e2e.conftest import main_page
from tests.factories import PASSWORD, MembershipFactory, OrganizationFactory, UserFactory

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def local_stripe(tmp_path, settings, site):
    server = StripeServer(data_dir=tmp_path / "stripe")
    server.start()
    # Its webhooks go to this test's server, signed with the secret the web checks.
    httpx.post(f"{server.url}/_config/webhooks/sluice", timeout=5,
               json={"url": f"{site}/api/billing/stripe/webhook", "secret": WEBHOOK_SECRET}
               ).raise_for_status()
    settings.STRIPE_API_KEY = API_KEY
    settings.STRIPE_API_BASE = server.url
    settings.STRIPE_WEBHOOK_SECRET = WEBHOOK_SECRET
    yield server
    server.stop()


def test_owner_adds_a_card_through_checkout_and_sees_it_on_file(new_page, local_stripe):
    org = OrganizationFactory(name="Card Co", status=OrgStatus.ACTIVE)
    owner = UserFactory(username="owner@card.test", email="owner@card.test")
    MembershipFactory(org=org, user=owner, role=Role.OWNER)
    page = new_page()
    page.goto("/portal/login/")
    page.get_by_label("Email").fill(owner.username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("link", name="Billing", exact=True).click()
    expect(page.locator('[data-payment-method="none"]')).to_be_visible()

    page.get_by_role("button", name="Add a payment method").click()
    expect(page.get_by_role("heading", name="Save a card for Card Co")).to_be_visible()
    main_page(page, "stripe-checkout")
    page.get_by_label("Card number").fill("4000 0000 0000 0002")  # Stripe's declined card
    page.get_by_role("button", name="Save card").click()
    expect(page.get_by_role("alert")).to_contain_text("declined")
    page.get_by_label("Card number").fill("4242 4242 4242 4242")
    page.get_by_role("button", name="Save card").click()

    expect(page).to_have_url(f"{page.url.split('/portal/')[0]}/portal/o/{org.slug}/billing/"
                             "?setup=done")
    for _ in range(30):  # the webhook follows the browser by about a second
        if page.locator('[data-payment-method="on-file"]').count():
            break
        page.wait_for_timeout(300)
        page.reload()
    expect(page.locator('[data-payment-method="on-file"]')).to_contain_text(
        "Payment method on file")
    main_page(page, "portal-billing-payment-method-on-file")
    assert StripeEvent.objects.filter(type="checkout.session.completed").count() == 1
