"""Usage of a paid month reported after its invoice was issued (the hook accepts events up to the
raw retention, days after the close) is billed on a supplement: the month's invoices then add
up, line by line, to the month rated as one."""

import threading
from datetime import UTC, date, datetime
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client

from billing.models import Invoice, InvoiceStatus, LineKind, OutboxKind, OutboxMessage
from billing.rating import total_cents, usage_billed
from billing.selectors import month_invoiced_lines, month_rated_lines
from billing.services import (
    discount_set,
    invoice_bill_late_usage,
    invoice_close_month,
    invoice_paid,
    invoice_reissue,
    invoice_void,
    outbox_drain,
)
from orgs.models import AuditEvent
from sluice.errors import IllegalTransition, Unprocessable
from tests.billing.conftest import usage_add
from tests.factories import OrganizationFactory, PoolFactory
from webhooks.models import EventType, WebhookEvent
from webhooks.services import webhook_endpoint_create

OCT = date(2026, 10, 1)
NOV_2 = datetime(2026, 11, 2, tzinfo=UTC)


def _paid_october(org, pool) -> Invoice:
    usage_add(org=org, pool=pool, hour=datetime(2026, 10, 3, 9, tzinfo=UTC),
              i=1_000_000, o=1_000_000, pi=500_000, po=800_000)
    invoice = invoice_close_month(org=org, month=OCT, actor="test", now=NOV_2)[0]
    return invoice_paid(invoice=invoice)


def _late(org, pool, hour=30, i=333_333, o=77_777):
    """Usage of October reported in November (an hour row the close did not see)."""
    usage_add(org=org, pool=pool, hour=datetime(2026, 10, hour, 21, tzinfo=UTC), i=i, o=o,
              pi=i // 2, po=o)


def _tokens(lines, kind) -> int:
    return sum(ln.quantity_tokens for ln in lines if ln.kind == kind)


@pytest.mark.django_db
def test_late_usage_of_a_paid_month_is_billed_on_a_supplement_that_adds_up(premium_price,
                                                                           pool):
    org = OrganizationFactory()
    main = _paid_october(org, pool)
    webhook_endpoint_create(org=org, url="https://hooks.example.com/sluice",
                            event_types=[EventType.INVOICE_ISSUED], description="",
                            actor="test")
    with pytest.raises(Unprocessable) as nothing:
        invoice_bill_late_usage(invoice=main, actor="test")
    assert nothing.value.code == "no_late_usage"
    _late(org, pool)

    supplement = invoice_bill_late_usage(invoice=main, actor="test", reason="late batch")
    assert (supplement.supplements_id, supplement.revision, supplement.period_start) == (
        main.pk, 2, OCT)
    assert supplement.number == main.number[:-1] + "2"
    assert supplement.status == InvoiceStatus.OPEN
    lines = list(supplement.lines.all())
    assert (_tokens(lines, LineKind.INPUT), _tokens(lines, LineKind.OUTPUT)) == (333_333, 77_777)
    assert _tokens(lines, LineKind.SPEED_CREDIT) == 333_333 - 333_333 // 2
    assert supplement.total_cents == sum(ln.amount_cents for ln in lines) > 0
    # The month's two invoices are the month rated as one, line for line and to the cent.
    rated = month_rated_lines(org=org, month=OCT)
    assert usage_billed(month_invoiced_lines(org=org, month=OCT)) == usage_billed(rated)
    assert main.total_cents + supplement.total_cents == total_cents(rated)
    # Billed once: a second call finds nothing left; the monthly close still finds the main.
    with pytest.raises(Unprocessable):
        invoice_bill_late_usage(invoice=supplement, actor="test")
    assert invoice_close_month(org=org, month=OCT, actor="test", now=NOV_2) == (main, False)
    assert OutboxMessage.objects.filter(kind=OutboxKind.INVOICE_PUSH,
                                        invoice=supplement).exists()
    event = WebhookEvent.objects.get(type=EventType.INVOICE_ISSUED)
    assert event.data["invoice"]["supplements"] == main.number
    audit = AuditEvent.objects.get(action="invoice.late_usage")
    assert (audit.reason, audit.after["supplements"]) == ("late batch", main.number)

    # More, at a discount agreed since: the second supplement bills only what is new, less
    # today's discount on its own subtotal; what was billed before is not rewritten.
    first_total = supplement.total_cents
    discount_set(org=org, discount_bps=1_000, actor="test", reason="partner")
    _late(org, pool, hour=31, i=1_000_000, o=0)
    second = invoice_bill_late_usage(invoice=main, actor="test")
    lines = list(second.lines.all())
    assert (second.revision, second.supplements_id) == (3, main.pk)
    assert (_tokens(lines, LineKind.INPUT), _tokens(lines, LineKind.OUTPUT)) == (1_000_000, 0)
    subtotal = sum(ln.amount_cents for ln in lines if ln.kind != LineKind.DISCOUNT)
    [discount] = [ln.amount_cents for ln in lines if ln.kind == LineKind.DISCOUNT]
    assert discount == -(subtotal // 10) and second.total_cents == subtotal + discount
    supplement.refresh_from_db()
    assert supplement.total_cents == first_total
    assert main.total_cents + first_total + second.total_cents > total_cents(
        month_rated_lines(org=org, month=OCT)), "rated now, the discount would take it all"


@pytest.mark.django_db
def test_only_a_paid_months_late_usage_is_billed_and_a_supplement_is_not_reissued(pool):
    org = OrganizationFactory()
    usage_add(org=org, pool=pool, hour=datetime(2026, 10, 3, tzinfo=UTC), i=1_000_000)
    open_invoice = invoice_close_month(org=org, month=OCT, actor="test", now=NOV_2)[0]
    _late(org, pool)
    with pytest.raises(IllegalTransition, match="Re-issue it"):
        invoice_bill_late_usage(invoice=open_invoice, actor="test")
    invoice_void(invoice=open_invoice, actor="test", reason="x")
    with pytest.raises(IllegalTransition, match="is void"):
        invoice_bill_late_usage(invoice=open_invoice, actor="test")
    assert Invoice.objects.filter(org=org).count() == 1, "nothing written"

    main = invoice_close_month(org=org, month=OCT, actor="test", now=NOV_2)[0]
    invoice_paid(invoice=main)
    _late(org, pool, hour=31)
    supplement = invoice_bill_late_usage(invoice=main, actor="test")
    with pytest.raises(IllegalTransition, match="not re-issued"):
        invoice_reissue(invoice=supplement, actor="test", reason="x")
    assert Invoice.objects.get(pk=supplement.pk).status == InvoiceStatus.OPEN
    # Voided, its usage is unbilled again, and billed by the next supplement.
    invoice_void(invoice=supplement, actor="test", reason="wrong")
    again = invoice_bill_late_usage(invoice=main, actor="test")
    assert again.total_cents == supplement.total_cents and again.revision == 4


@pytest.mark.django_db
def test_usage_that_shrank_since_the_invoice_is_not_billed_as_late_usage(pool):
    """Rollups only grow by ingestion; should one shrink (a manual correction), the difference
    is not late usage: refused, nothing written."""
    from metering.models import UsageHourly

    org = OrganizationFactory()
    main = _paid_october(org, pool)
    UsageHourly.objects.filter(org=org).update(output_tokens=800_000)  # of 1,000,000
    with pytest.raises(Unprocessable) as refused:
        invoice_bill_late_usage(invoice=main, actor="test")
    assert refused.value.code == "usage_decreased"
    assert Invoice.objects.filter(org=org).count() == 1


@pytest.mark.django_db
def test_a_zero_invoice_is_supplemented_too(pool):
    """An org idle at the close got a zero invoice (paid at birth): its late usage is billed."""
    org = OrganizationFactory()
    zero = invoice_close_month(org=org, month=OCT, actor="test", now=NOV_2)[0]
    assert (zero.status, zero.total_cents) == (InvoiceStatus.PAID, 0)
    _late(org, pool)
    supplement = invoice_bill_late_usage(invoice=zero, actor="test")
    assert supplement.total_cents == total_cents(month_rated_lines(org=org, month=OCT)) > 0


@pytest.mark.django_db(transaction=True)
def test_operators_racing_bill_the_late_usage_once():
    pool = PoolFactory()
    org = OrganizationFactory()
    main = _paid_october(org, pool)
    _late(org, pool)
    barrier, billed, refused, errors = threading.Barrier(8), [], [], []

    def bill():
        try:
            barrier.wait()
            billed.append(invoice_bill_late_usage(invoice=main, actor="test"))
        except Unprocessable as exc:
            refused.append(exc.code)
        except Exception as exc:  # noqa: BLE001 - surfaced by the assertion below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=bill) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert (len(billed), refused) == (1, ["no_late_usage"] * 7)
    assert Invoice.objects.filter(supplements=main).count() == 1
    rated = month_rated_lines(org=org, month=OCT)
    assert usage_billed(month_invoiced_lines(org=org, month=OCT)) == usage_billed(rated)


def _reconcile() -> tuple[int, str]:
    out = StringIO()
    try:
        call_command("billing_reconcile", stdout=out)
    except SystemExit as exc:
        return exc.code, out.getvalue()
    return 0, out.getvalue()


@pytest.mark.django_db
def test_supplement_reaches_stripe_and_reconcile_stops_listing_the_month(stripe, pool):
    org = OrganizationFactory()
    usage_add(org=org, pool=pool, hour=datetime(2026, 10, 3, tzinfo=UTC), i=1_000_000)
    main = invoice_close_month(org=org, month=OCT, actor="test", now=NOV_2)[0]
    outbox_drain()
    main = invoice_paid(invoice=main)  # as Stripe's webhook would (the stand-in cannot pay)
    paid_only_here = f"{main.number}\tstatus differs\tours=paid\tstripe=open"
    assert _reconcile() == (1, f"{paid_only_here}\n1 difference(s).\n")
    _late(org, pool)
    code, out = _reconcile()
    assert code == 1 and "usage reported after the close: +411,110 tokens" in out
    assert "bill it on a supplement" in out
    supplement = invoice_bill_late_usage(invoice=main, actor="test")
    assert outbox_drain()["done"] == 1
    supplement.refresh_from_db()
    remote = stripe.call("GET", f"/v1/invoices/{supplement.stripe_invoice_id}")
    assert (remote["total"], remote["status"]) == (supplement.total_cents, "open")
    assert remote["metadata"]["sluice_invoice_id"] == str(supplement.pk)
    assert remote["description"] == (f"Sluice invoice {supplement.number}: usage reported "
                                     f"after invoice {main.number}")
    assert _reconcile() == (1, f"{paid_only_here}\n1 difference(s).\n")


@pytest.mark.django_db
def test_operator_api_and_admin_action_bill_late_usage(operator_client, operator, two_orgs,
                                                       pool):
    from tests.totp import console_client

    a, b = two_orgs
    main = _paid_october(a.org, pool)
    url = f"/api/v1/operator/billing/invoices/{main.pk}/late-usage"
    assert operator_client.post(url, {}).status_code == 400  # a reason is required
    nothing = operator_client.post(url, {"reason": "checked"})
    assert (nothing.status_code, nothing.json()["error"]["code"]) == (422, "no_late_usage")
    assert a.client.post(url, {"reason": "x"}).status_code == 403
    _late(a.org, pool)
    made = operator_client.post(url, {"reason": "late batch"})
    assert made.status_code == 201
    assert (made.json()["supplements"], made.json()["revision"]) == (main.number, 2)
    listed = a.client.get(f"/api/v1/orgs/{a.org.pk}/billing/invoices").json()["results"]
    assert {i["number"]: i["supplements"] for i in listed} == {
        main.number: None, made.json()["number"]: main.number}
    assert b.client.get(f"/api/v1/orgs/{b.org.pk}/billing/invoices").json()["results"] == []
    page = a.client.get(f"/api/v1/orgs/{a.org.pk}/billing/invoices/{made.json()['id']}")
    assert page.json()["supplements"] == main.number
    portal = Client()
    portal.force_login(a.owner)
    html = portal.get(f"/portal/o/{a.org.slug}/billing/").content.decode()
    assert f"late usage, in addition to {main.number}" in html
    page = portal.get(f"/portal/o/{a.org.slug}/billing/invoices/{made.json()['id']}/")
    assert f'data-supplements="{main.number}"' in page.content.decode()
    pdf = portal.get(f"/portal/o/{a.org.slug}/billing/invoices/{made.json()['id']}/pdf/")
    assert pdf.status_code == 200 and pdf["Content-Type"] == "application/pdf"
    other = Client()
    other.force_login(b.owner)
    assert other.get(f"/portal/o/{a.org.slug}/billing/invoices/{made.json()['id']}/"
                     ).status_code == 404

    _late(a.org, pool, hour=31)
    console = console_client(operator)
    console.post("/admin/billing/invoice/", {"action": "bill_late_usage",
                                             "_selected_action": [main.pk]})
    assert Invoice.objects.filter(supplements=main).count() == 2
    html = console.get(f"/admin/console/invoices/{made.json()['id']}/").content.decode()
    assert f'data-supplements="{main.number}"' in html


@pytest.mark.django_db
def test_the_monthly_run_bills_each_paid_months_late_usage_once(pool):
    """Beat, on the 1st after the close: every paid month within the raw retention that
    received usage since its invoice gets one supplement; nothing else does."""
    from billing.services import invoices_bill_late_usage
    from metering.partitions import usage_started_at_window

    dec_1 = datetime(2026, 12, 1, 0, 45, tzinfo=UTC)
    assert usage_started_at_window(now=dec_1)[0] <= datetime(2026, 10, 1, tzinfo=UTC)
    late, quiet, unpaid = (OrganizationFactory() for _ in range(3))
    main = _paid_october(late, pool)
    _paid_october(quiet, pool)
    usage_add(org=unpaid, pool=pool, hour=datetime(2026, 10, 3, tzinfo=UTC), i=1_000_000)
    open_invoice = invoice_close_month(org=unpaid, month=OCT, actor="test", now=NOV_2)[0]
    for org in (late, unpaid):
        _late(org, pool)

    assert invoices_bill_late_usage(actor="celery:test", now=dec_1) == 1
    supplement = Invoice.objects.get(supplements__isnull=False)
    assert supplement.supplements == main
    assert not Invoice.objects.filter(supplements=open_invoice).exists()
    assert AuditEvent.objects.get(action="invoice.late_usage").actor_label == "celery:test"
    assert invoices_bill_late_usage(actor="celery:test", now=dec_1) == 0
