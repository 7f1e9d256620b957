"""No invoice totals below zero: a month whose booking refunds exceed its charges carries the
difference as a credit, and the next invoices use it up to their own subtotal. Stripe (the local
devstripe server) never gets a negative invoice, and its totals match ours."""

from datetime import UTC, date, datetime, timedelta

import pytest
from django.db import IntegrityError, transaction

from billing.models import Invoice, InvoiceStatus
from billing.reconcile import reconcile
from billing.selectors import credit_balance_cents
from billing.services import (
    booking_confirm,
    invoice_bill_late_usage,
    invoice_close_month,
    invoice_reissue,
    outbox_drain,
)
from quotas.bookings import BookingAsk, booking_cancel
from tests.billing.conftest import usage_add
from tests.billing.test_bookings_race import _race
from tests.factories import AllocationFactory, MembershipFactory, OrganizationFactory

pytestmark = pytest.mark.django_db

OCT, NOV, DEC, JAN = date(2026, 10, 1), date(2026, 11, 1), date(2026, 12, 1), date(2027, 1, 1)


def after(month: date) -> datetime:
    """The 2nd of the month after `month`: when it is closed."""
    return datetime(month.year + month.month // 12, month.month % 12 + 1, 2, tzinfo=UTC)


def close(org, month: date) -> Invoice:
    return invoice_close_month(org=org, month=month, actor="test", now=after(month))[0]


@pytest.fixture
def org(pool, premium_price):
    """Booked in October a window of November ($40), cancelled on 3 November (refunded in
    full): November's only line is a refund of $40."""
    org = OrganizationFactory()
    AllocationFactory(org=org, pool=pool, guaranteed_tps=1_000, burst_tps=2_000)
    MembershipFactory(org=org)
    start = datetime(2026, 11, 10, tzinfo=UTC)
    booking = booking_confirm(org=org, pool=pool, actor="test", now=datetime(2026, 10, 5,
                                                                              tzinfo=UTC),
                              ask=BookingAsk(starts_at=start, ends_at=start + timedelta(hours=2),
                                             output_tps=1_000))
    booking_cancel(booking=booking, actor="test", now=datetime(2026, 11, 3, tzinfo=UTC))
    return org


def tokens(org, pool, month: date, dollars: int) -> None:
    """Output tokens worth `dollars` ($30 + $10 premium per million) used in `month`."""
    usage_add(org=org, pool=pool, hour=datetime(month.year, month.month, 5, tzinfo=UTC),
              o=dollars * 25_000)


def kinds(invoice: Invoice) -> list[tuple[str, int]]:
    return [(ln.kind, ln.amount_cents) for ln in invoice.lines.order_by("position")]


def test_a_month_of_refunds_carries_a_credit_and_totals_zero(org, pool):
    assert close(org, OCT).total_cents == 4_000
    november = close(org, NOV)
    assert kinds(november) == [("booking_refund", -4_000), ("credit_carried", 4_000)]
    assert (november.total_cents, november.status) == (0, InvoiceStatus.PAID)
    assert "Credit carried to the next invoice" in november.lines.last().description
    assert credit_balance_cents(org=org) == 4_000


def test_the_next_invoices_use_the_credit_up_to_their_subtotal(org, pool, stripe):
    close(org, OCT), close(org, NOV)
    tokens(org, pool, DEC, 15)
    december = close(org, DEC)
    assert kinds(december) == [("output", 1_125), ("premium_output", 375),
                               ("credit_applied", -1_500)]
    assert december.total_cents == 0
    assert credit_balance_cents(org=org) == 2_500
    tokens(org, pool, JAN, 40)
    january = close(org, JAN)
    assert kinds(january)[-1] == ("credit_applied", -2_500)
    assert january.total_cents == 4_000 - 2_500
    assert credit_balance_cents(org=org) == 0

    # Stripe: October and January, each totalling what ours does; nothing negative.
    assert outbox_drain() == {"done": 2}
    remote = {i["metadata"]["sluice_invoice_id"]: i for i in stripe.list("/v1/invoices")}
    assert set(remote) == {str(Invoice.objects.get(org=org, period_start=OCT).pk),
                           str(january.pk)}
    assert remote[str(january.pk)]["total"] == 1_500
    assert sorted(line["amount"] for line in remote[str(january.pk)]["lines"]["data"]) == [
        -2_500, 1_000, 3_000]
    assert all(invoice["total"] >= 0 for invoice in remote.values())
    assert reconcile() == []


def test_a_reissue_gives_back_the_credit_then_uses_it_again(org, pool):
    close(org, OCT), close(org, NOV)
    tokens(org, pool, DEC, 50)
    december = close(org, DEC)
    assert december.total_cents == 1_000
    again = invoice_reissue(invoice=december, actor="ops", reason="discount corrected")
    assert kinds(again)[-1] == ("credit_applied", -4_000)
    assert again.total_cents == 1_000
    assert credit_balance_cents(org=org) == 0


def test_late_usage_and_reconcile_are_not_confused_by_credit_lines(org, pool):
    close(org, OCT), close(org, NOV)
    tokens(org, pool, DEC, 50)
    december = close(org, DEC)
    Invoice.objects.filter(pk=december.pk).update(status=InvoiceStatus.PAID)
    # Credit lines are no usage: nothing reads as usage reported after the close.
    assert not [d for d in reconcile(month=DEC) if "usage" in d.problem]
    usage_add(org=org, pool=pool, hour=datetime(2026, 12, 6, tzinfo=UTC), o=125_000)
    supplement = invoice_bill_late_usage(invoice=december, actor="test")
    assert kinds(supplement) == [("output", 375), ("premium_output", 125)]
    assert supplement.total_cents == 500


def test_the_database_refuses_a_negative_total(org):
    with pytest.raises(IntegrityError), transaction.atomic():
        Invoice.objects.create(org=org, period_start=JAN, period_end=date(2027, 2, 1),
                               number="SL-NEG", total_cents=-1)


@pytest.mark.django_db(transaction=True)
def test_two_months_closed_at_once_use_the_credit_once(org, pool):
    close(org, OCT), close(org, NOV)
    tokens(org, pool, DEC, 40)
    tokens(org, pool, JAN, 40)
    _race([lambda: close(org, DEC), lambda: close(org, JAN)])
    applied = sorted(-amount for invoice in Invoice.objects.filter(period_start__in=[DEC, JAN])
                     for kind, amount in kinds(invoice) if kind == "credit_applied")
    assert applied == [4_000]
    assert credit_balance_cents(org=org) == 0
