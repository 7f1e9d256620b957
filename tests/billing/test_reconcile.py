from datetime import UTC, date, datetime
from io import StringIO

import pytest
from django.core.management import call_command

from billing.models import Invoice
from billing.services import invoice_close_month, outbox_drain
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
