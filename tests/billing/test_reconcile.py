from datetime import UTC, date, datetime
from io import StringIO

import pytest
from django.core.management import call_command

from billing.models import Invoice
from billing.services import (
    discount_set,
    invoice_bill_late_usage,
    invoice_close_month,
    invoice_reissue,
    outbox_drain,
)
from tests.billing.conftest import usage_add
from tests.factories import OrganizationFactory

pytestmark = pytest.mark.django_db


def _pushed_invoices(pool, n):
    invoices = []
    for _ in range(n):
        org = OrganizationFactory()
        usage_add(org=org, pool=pool, hour=datetime(2026, 10, 5, tzinfo=UTC), i=1_000_000)
        invoices.append(invoice_close_month(org=org, month=date(2026, 10, 1), actor="test",
                                            now=datetime(2026, 11, 2, tzinfo=UTC))[0])
    return invoices


def _run(*args):
    out = StringIO()
    code = 0
    try:
        call_command("billing_reconcile", *args, stdout=out)
    except SystemExit as exc:
        code = exc.code
    return code, out.getvalue()


def test_reconcile_reports_each_kind_of_difference(stripe, pool):
    agreed, paid_here, wrong_total, unpushed = _pushed_invoices(pool, 4)
    outbox_drain(limit=3)
    assert _run("--month", "2026-10")[1].count("not in Stripe yet") == 1
    Invoice.objects.filter(pk=paid_here.pk).update(status="paid")
    Invoice.objects.filter(pk=wrong_total.pk).update(total_cents=1)
    code, out = _run()
    assert code == 1
    lines = sorted(line.split("\t")[:2] for line in out.splitlines()[:-1])
    assert lines == sorted([
        [paid_here.number, "status differs"],
        [wrong_total.number, "total differs"],
        [unpushed.number, "not in Stripe yet"],
    ])
    assert agreed.number not in out


def test_reconcile_is_quiet_when_everything_agrees(stripe, pool):
    _pushed_invoices(pool, 2)
    outbox_drain()
    assert _run() == (0, "0 difference(s).\n")


def test_usage_reported_after_the_close_is_listed_until_the_month_is_billed(stripe, pool):
    """Late usage (up to the raw retention, days after the 1st) changes a month already
    invoiced: reconcile says which invoices, by how much, and what settles it: a reissue for an
    open one; a supplement for a paid one (a zero invoice is paid at birth). A discount changed
    since is not usage: not listed."""
    invoiced, untouched = _pushed_invoices(pool, 2)
    idle = OrganizationFactory()  # nothing used by the close: a zero invoice
    zero = invoice_close_month(org=idle, month=date(2026, 10, 1), actor="test",
                               now=datetime(2026, 11, 2, tzinfo=UTC))[0]
    outbox_drain()
    discount_set(org=untouched.org, discount_bps=2_000, actor="test", reason="renegotiated")
    assert _run() == (0, "0 difference(s).\n")

    usage_add(org=invoiced.org, pool=pool, hour=datetime(2026, 10, 31, 23, tzinfo=UTC),
              i=1_000_000)
    usage_add(org=idle, pool=pool, hour=datetime(2026, 10, 20, tzinfo=UTC), i=1_000_000)
    late = ("usage reported after the close: +1,000,000 tokens; rated again now: {} cents; "
            "{}")
    code, out = _run("--month", "2026-10")
    assert code == 1
    assert sorted(line.split("\t") for line in out.splitlines()[:-1]) == sorted([
        [invoiced.number, late.format(2 * invoiced.total_cents, "re-issue it"),
         f"ours={invoiced.total_cents}", "stripe=-"],
        [zero.number, late.format(invoiced.total_cents, "bill it on a supplement (late usage)"),
         "ours=0", "stripe=-"],
    ])
    assert untouched.number not in out

    reissued = invoice_reissue(invoice=invoiced, actor="test", reason="late usage")
    outbox_drain()
    code, out = _run()
    assert reissued.total_cents == 2 * invoiced.total_cents
    assert [line.split("\t")[0] for line in out.splitlines()[:-1]] == [zero.number]
    invoice_bill_late_usage(invoice=zero, actor="test")
    outbox_drain()
    assert _run() == (0, "0 difference(s).\n")
