from datetime import UTC, date, datetime

import pytest
from django.utils import timezone

from billing.models import BillingAccount, PriceVersion
from billing.services import invoice_close_month
from metering.models import UsageHourly
from orgs.models import Role
from tests.factories import MembershipFactory, PoolFactory, UserFactory
from tests.portal.conftest import portal_client

pytestmark = pytest.mark.django_db

OCT = date(2026, 10, 1)


@pytest.fixture
def billed(orgs, operator):
    """Org A used a priced pool in October (invoiced) and this month (month to date)."""
    a, _ = orgs
    pool = PoolFactory(model="frontier-fast")
    PriceVersion.objects.create(
        pool=pool, effective_from=datetime(2026, 1, 1, tzinfo=UTC),
        input_micros_per_mtok=5_000_000, output_micros_per_mtok=30_000_000,
        premium_input_micros_per_mtok=2_000_000, premium_output_micros_per_mtok=10_000_000)
    for hour, tokens in ((datetime(2026, 10, 3, 9, tzinfo=UTC), 1_000_000),
                         (timezone.now().replace(minute=0, second=0, microsecond=0), 2_000_000)):
        UsageHourly.objects.create(org=a.org, pool=pool, hour=hour, requests=1,
                                   input_tokens=tokens, output_tokens=tokens,
                                   premium_input_tokens=tokens, premium_output_tokens=tokens)
    invoice, _ = invoice_close_month(org=a.org, month=OCT, actor=operator)
    return a, invoice


def _billing_urls(invoice) -> list[str]:
    return ["billing/", f"billing/invoices/{invoice.pk}/", f"billing/invoices/{invoice.pk}/pdf/"]


def _member(org, role):
    user = UserFactory()
    MembershipFactory(org=org, user=user, role=role)
    return portal_client(user)


def test_owner_sees_month_to_date_with_premium_and_the_invoice(billed):
    a, invoice = billed
    page = a.client.get(f"/portal/o/{a.org.slug}/billing/").content.decode()
    assert 'data-kind="premium_input"' in page and 'data-kind="premium_output"' in page
    # 2M input tokens at $5 + $2 premium and 2M output at $30 + $10 per million: $14 + $80.
    assert 'data-field="mtd">$94.00<' in page
    assert f'data-invoice="{invoice.number}"' in page
    html = a.client.get(f"/portal/o/{a.org.slug}/billing/invoices/{invoice.pk}/")
    assert html.status_code == 200 and invoice.number in html.content.decode()
    pdf = a.client.get(f"/portal/o/{a.org.slug}/billing/invoices/{invoice.pk}/pdf/")
    assert pdf["Content-Type"] == "application/pdf" and pdf.content.startswith(b"%PDF")


@pytest.mark.parametrize("role", [Role.ADMIN, Role.DEVELOPER, Role.VIEWER])
def test_members_without_a_billing_role_get_404_and_no_nav_entry(billed, role):
    a, invoice = billed
    client = _member(a.org, role)
    for url in _billing_urls(invoice):
        assert client.get(f"/portal/o/{a.org.slug}/{url}").status_code == 404
    assert client.post(f"/portal/o/{a.org.slug}/billing/spend-cap/",
                       {"spend_cap_dollars": "5", "alert_thresholds": "50"}).status_code == 404
    assert f"/portal/o/{a.org.slug}/billing/" not in client.get(
        f"/portal/o/{a.org.slug}/").content.decode()


def test_billing_member_sees_billing(billed):
    a, _ = billed
    client = _member(a.org, Role.BILLING)
    assert client.get(f"/portal/o/{a.org.slug}/billing/").status_code == 200


def test_other_org_gets_404_on_billing_pages(billed, orgs):
    a, invoice = billed
    _, b = orgs
    for url in _billing_urls(invoice):
        assert b.client.get(f"/portal/o/{a.org.slug}/{url}").status_code == 404
    # B's own slug with A's invoice id.
    assert b.client.get(f"/portal/o/{b.org.slug}/billing/invoices/{invoice.pk}/").status_code == 404


def test_spend_cap_is_saved_and_bad_input_writes_nothing(billed):
    a, _ = billed
    url = f"/portal/o/{a.org.slug}/billing/spend-cap/"
    bad = a.client.post(url, {"spend_cap_dollars": "-1", "alert_thresholds": "50, 900"})
    assert bad.status_code == 400
    assert set(bad.context["form"].errors) == {"spend_cap_dollars", "alert_thresholds"}
    assert not BillingAccount.objects.filter(org=a.org, spend_cap_micros__gt=0).exists()
    assert a.client.post(url, {"spend_cap_dollars": "250.50",
                               "alert_thresholds": "80, 50"}).status_code == 302
    account = BillingAccount.objects.get(org=a.org)
    assert (account.spend_cap_micros, account.alert_thresholds) == (250_500_000, [50, 80])


@pytest.mark.parametrize("invoices", [1, 4])
def test_billing_page_queries_do_not_grow_with_invoices(billed, operator, invoices,
                                                        django_assert_num_queries):
    a, _ = billed
    for month in range(1, invoices):
        invoice_close_month(org=a.org, month=date(2026, month, 1), actor=operator)
    a.client.get(f"/portal/o/{a.org.slug}/billing/")
    # 14, the month's booking charges (for the spend and for the lines), and whether a
    # payment method is on file (the org's Stripe customer: none here).
    with django_assert_num_queries(17):
        assert a.client.get(f"/portal/o/{a.org.slug}/billing/").status_code == 200


def test_payment_method_link_goes_to_stripe_checkout(billed, stripe):  # noqa: F811
    a, _ = billed
    response = a.client.post(f"/portal/o/{a.org.slug}/billing/payment-method/")
    assert response.status_code == 302
    assert response["Location"].startswith("http")
    assert "/portal/o/" not in response["Location"].split("?")[0]
