from datetime import UTC, date, datetime

import pytest

from billing.models import Invoice, InvoiceStatus, PriceVersion
from billing.services import invoice_close_month
from tests.billing.conftest import usage_add
from tests.factories import OrganizationFactory
from tests.totp import console_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(operator):
    return console_client(operator)


@pytest.mark.parametrize("model", ["priceversion", "invoice", "outboxmessage", "stripeevent",
                                   "billingaccount", "spendalert"])
def test_changelists_render(admin_client, model, pool):
    org = OrganizationFactory()
    usage_add(org=org, pool=pool, hour=datetime(2026, 10, 5, tzinfo=UTC), i=10_000_000)
    invoice_close_month(org=org, month=date(2026, 10, 1), actor="test",
                        now=datetime(2026, 11, 2, tzinfo=UTC))
    assert admin_client.get(f"/admin/billing/{model}/").status_code == 200


def test_admin_adds_price_versions_through_the_service(admin_client, pool):
    response = admin_client.post("/admin/billing/priceversion/add/", {
        "pool": pool.pk, "effective_from_0": "2099-01-01", "effective_from_1": "00:00:00",
        "input_micros_per_mtok": 5_000_000, "output_micros_per_mtok": 30_000_000,
        "premium_input_micros_per_mtok": 0, "premium_output_micros_per_mtok": 0,
        "booking_output_micros_per_tps_hour": 20_000, "booking_input_micros_per_tps_hour": 4_000,
        "note": "x"})
    assert response.status_code == 302
    version = PriceVersion.objects.get()
    assert version.created_by is not None


def test_admin_void_action_uses_the_service(admin_client, pool):
    org = OrganizationFactory()
    usage_add(org=org, pool=pool, hour=datetime(2026, 10, 5, tzinfo=UTC), i=10_000_000)
    invoice, _ = invoice_close_month(org=org, month=date(2026, 10, 1), actor="test",
                                     now=datetime(2026, 11, 2, tzinfo=UTC))
    admin_client.post("/admin/billing/invoice/", {"action": "void",
                                                  "_selected_action": [invoice.pk]})
    assert Invoice.objects.get(pk=invoice.pk).status == InvoiceStatus.VOID
