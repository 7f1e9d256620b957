from datetime import UTC, date, datetime

import pytest
from rest_framework.test import APIClient

from billing.models import BillingAccount, Invoice, InvoiceStatus
from billing.services import invoice_close_month
from orgs.models import Role
from tests.billing.conftest import usage_add
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db
NOV_2 = datetime(2026, 11, 2, tzinfo=UTC)


def _invoice(org, pool, month=10, tokens=1_000_000):
    usage_add(org=org, pool=pool, hour=datetime(2026, month, 5, tzinfo=UTC), i=tokens,
              o=tokens // 10)
    return invoice_close_month(org=org, month=date(2026, month, 1), actor="test",
                               now=NOV_2)[0]


def _base(org):
    return f"/api/v1/orgs/{org.pk}/billing"


def test_org_sees_its_invoices_and_lines(two_orgs, pool):
    a, _ = two_orgs
    invoice = _invoice(a.org, pool)
    listed = a.client.get(f"{_base(a.org)}/invoices").json()
    assert [row["number"] for row in listed["results"]] == [invoice.number]
    detail = a.client.get(f"{_base(a.org)}/invoices/{invoice.pk}").json()
    assert detail["total_cents"] == 500 + 300
    assert [ln["kind"] for ln in detail["lines"]] == ["input", "output"]
    assert "stripe_invoice_id" not in detail


def test_org_a_never_sees_org_b_invoices(two_orgs, pool):
    a, b = two_orgs
    invoice = _invoice(a.org, pool)
    for path in (f"{_base(a.org)}/invoices", f"{_base(a.org)}/invoices/{invoice.pk}",
                 f"{_base(a.org)}/invoices/{invoice.pk}/html",
                 f"{_base(a.org)}/invoices/{invoice.pk}/pdf",
                 f"{_base(a.org)}/invoices/{invoice.pk}/usage.csv",
                 f"{_base(a.org)}/usage.csv", f"{_base(a.org)}/summary",
                 f"{_base(a.org)}/spend-cap"):
        response = b.client.get(path)
        assert response.status_code == 404, path
        assert response.json()["error"]["code"] == "not_found"
    # B's own org, A's invoice id: also 404.
    assert b.client.get(f"{_base(b.org)}/invoices/{invoice.pk}").status_code == 404
    assert b.client.put(f"{_base(a.org)}/spend-cap", {"spend_cap_micros": 1},
                        format="json").status_code == 404


@pytest.mark.parametrize(("role", "status"), [(Role.BILLING, 200), (Role.OWNER, 200),
                                              (Role.ADMIN, 404), (Role.DEVELOPER, 404),
                                              (Role.VIEWER, 404)])
def test_only_owners_and_billing_members_see_money(two_orgs, role, status):
    a, _ = two_orgs
    user = UserFactory()
    MembershipFactory(org=a.org, user=user, role=role)
    client = APIClient()
    client.force_authenticate(user)
    assert client.get(f"{_base(a.org)}/invoices").status_code == status


def test_invoice_list_query_count_is_flat(two_orgs, pool, django_assert_num_queries):
    a, _ = two_orgs
    for month in (7, 8, 9, 10):
        _invoice(a.org, pool, month=month)
    with django_assert_num_queries(3):  # membership+org, count, page
        response = a.client.get(f"{_base(a.org)}/invoices")
    assert response.json()["count"] == 4


def test_operator_invoice_list_query_count_is_flat(operator_client, two_orgs, pool,
                                                   django_assert_num_queries):
    for org in (two_orgs[0].org, two_orgs[1].org):
        _invoice(org, pool, month=9)
        _invoice(org, pool, month=10)
    with django_assert_num_queries(2):  # count, page with orgs joined
        response = operator_client.get("/api/v1/operator/billing/invoices")
    assert response.json()["count"] == 4
    filtered = operator_client.get("/api/v1/operator/billing/invoices",
                                   {"org": two_orgs[0].org.pk, "month": "2026-10"}).json()
    assert filtered["count"] == 1
    bad = operator_client.get("/api/v1/operator/billing/invoices", {"month": "Oct"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_input"


def test_invoice_html_and_usage_csv(two_orgs, pool):
    a, _ = two_orgs
    key_hour = datetime(2026, 10, 6, 7, tzinfo=UTC)
    usage_add(org=a.org, pool=pool, hour=key_hour, i=10, o=20, pi=4, po=5, requests=3)
    invoice = _invoice(a.org, pool)
    html = a.client.get(f"{_base(a.org)}/invoices/{invoice.pk}/html")
    assert html["Content-Type"].startswith("text/html")
    assert invoice.number in html.content.decode() and "$8.00" in html.content.decode()
    pdf = a.client.get(f"{_base(a.org)}/invoices/{invoice.pk}/pdf")
    assert pdf["Content-Type"] == "application/pdf"
    assert pdf.content.startswith(b"%PDF-")
    csv_response = a.client.get(f"{_base(a.org)}/invoices/{invoice.pk}/usage.csv")
    rows = b"".join(csv_response.streaming_content).decode().splitlines()
    assert rows[0].startswith("hour_utc,pool,api_key,requests")
    assert len(rows) == 3
    assert rows[1].startswith("2026-10-05T00:00:00+00:00")
    assert rows[2].endswith(",3,0,10,20,4,5,1")  # the last column: hours (1, or 24 a day)


def test_summary_is_month_to_date(two_orgs, pool):
    a, _ = two_orgs
    now = datetime.now(tz=UTC).replace(minute=0, second=0, microsecond=0)
    usage_add(org=a.org, pool=pool, hour=now.replace(day=1), o=1_000_000)
    summary = a.client.get(f"{_base(a.org)}/summary").json()
    assert (summary["cost_micros"], summary["cost_cents"]) == (30_000_000, 3000)


def test_spend_cap_put_validates_and_saves(two_orgs):
    a, _ = two_orgs
    assert a.client.get(f"{_base(a.org)}/spend-cap").json() == {
        "spend_cap_micros": 0, "alert_thresholds": [50, 80, 100]}
    assert not BillingAccount.objects.exists(), "reading creates nothing"
    bad = a.client.put(f"{_base(a.org)}/spend-cap", {"spend_cap_micros": -1}, format="json")
    assert bad.status_code == 400 and "spend_cap_micros" in bad.json()["error"]["fields"]
    # Beyond a 64-bit column (found by schemathesis: a 500 "bigint out of range").
    for huge in (10**15 + 1, 2**63, 10**30):
        bad = a.client.put(f"{_base(a.org)}/spend-cap", {"spend_cap_micros": huge},
                           format="json")
        assert bad.status_code == 400 and "spend_cap_micros" in bad.json()["error"]["fields"]
    assert not BillingAccount.objects.exists(), "nothing written"
    ok = a.client.put(f"{_base(a.org)}/spend-cap", {"spend_cap_micros": 5_000_000,
                                                   "alert_thresholds": [90, 25]}, format="json")
    assert ok.json() == {"spend_cap_micros": 5_000_000, "alert_thresholds": [25, 90]}
    assert a.client.get(f"{_base(a.org)}/spend-cap").json()["spend_cap_micros"] == 5_000_000


def test_operator_void_reissue_and_close(operator_client, two_orgs, pool):
    a, _ = two_orgs
    invoice = _invoice(a.org, pool)
    base = "/api/v1/operator/billing/invoices"
    assert operator_client.post(f"{base}/{invoice.pk}/void", {}).status_code == 400
    reissued = operator_client.post(f"{base}/{invoice.pk}/reissue", {"reason": "fix"})
    assert reissued.status_code == 201 and reissued.json()["revision"] == 2
    void_again = operator_client.post(f"{base}/{invoice.pk}/void", {"reason": "x"})
    assert void_again.status_code == 409
    assert void_again.json()["error"]["code"] == "illegal_transition"
    closed = operator_client.post(f"{base}/close", {"org": a.org.pk, "month": "2026-10"})
    assert closed.status_code == 200 and closed.json()["id"] == reissued.json()["id"]
    assert Invoice.objects.filter(org=a.org, status=InvoiceStatus.VOID).count() == 1


def test_operator_endpoints_refuse_org_members(two_orgs):
    a, _ = two_orgs
    response = a.client.get("/api/v1/operator/billing/invoices")
    assert response.status_code == 403


def test_operator_creates_price_versions(operator_client, pool):
    ok = operator_client.post("/api/v1/operator/billing/prices", {
        "pool": pool.pk, "effective_from": "2099-01-01T00:00:00Z",
        "input_micros_per_mtok": 5_000_000, "output_micros_per_mtok": 30_000_000,
        "premium_input_micros_per_mtok": 1_000_000}, format="json")
    assert ok.status_code == 201
    off_hour = operator_client.post("/api/v1/operator/billing/prices", {
        "pool": pool.pk, "effective_from": "2099-01-01T00:30:00Z",
        "input_micros_per_mtok": 1, "output_micros_per_mtok": 1}, format="json")
    assert off_hour.status_code == 422
    assert off_hour.json()["error"]["code"] == "price_not_on_hour"


def test_payment_method_session_link(stripe, two_orgs):
    a, _ = two_orgs
    response = a.client.post(f"{_base(a.org)}/payment-method-session")
    assert response.status_code == 200
    assert response.json()["url"].startswith(f"{stripe.url}/checkout/cs_test_")
    assert len(stripe.list("/v1/customers")) == 1
    a.client.post(f"{_base(a.org)}/payment-method-session")
    assert len(stripe.list("/v1/customers")) == 1, "the customer is created once"


def test_openapi_schema_builds(operator_client):
    response = operator_client.get("/api/schema/")
    assert response.status_code == 200
    assert b"/api/v1/orgs/{org_id}/billing/invoices" in response.content
