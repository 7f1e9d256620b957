import threading
from datetime import UTC, date, datetime

import pytest
from django.db import connection
from django.db.utils import ProgrammingError

from billing.models import Invoice, InvoiceStatus, OutboxKind, OutboxMessage, PriceVersion
from billing.rating import total_cents
from billing.selectors import month_rated_lines
from billing.services import (
    discount_set,
    invoice_close_month,
    invoice_reissue,
    invoice_void,
    invoices_close_previous_month,
    price_version_create,
)
from orgs.models import AuditEvent, OrgStatus
from sluice.errors import Conflict, IllegalTransition, Unprocessable
from tests.billing.conftest import usage_add
from tests.factories import OrganizationFactory, PoolFactory

OCT = date(2026, 10, 1)
NOV_2 = datetime(2026, 11, 2, tzinfo=UTC)


def _october_usage(org, pool):
    usage_add(org=org, pool=pool, hour=datetime(2026, 10, 3, 9, tzinfo=UTC),
              i=1_000_000, o=1_000_000, pi=500_000, po=800_000)
    usage_add(org=org, pool=pool, hour=datetime(2026, 10, 31, 23, tzinfo=UTC), i=1_000_000)
    # November usage must not leak into October's invoice.
    usage_add(org=org, pool=pool, hour=datetime(2026, 11, 1, 0, tzinfo=UTC), i=9_000_000)


@pytest.mark.django_db
def test_close_rates_the_month_into_lines_and_is_idempotent(operator, pool, premium_price):
    org = OrganizationFactory()
    _october_usage(org, pool)
    invoice, created = invoice_close_month(org=org, month=OCT, actor=operator, now=NOV_2)
    assert created
    lines = {ln.kind: (ln.quantity_tokens, ln.amount_cents) for ln in invoice.lines.all()}
    assert lines == {
        "input": (2_000_000, 1000), "output": (1_000_000, 3000),
        "premium_input": (2_000_000, 400), "premium_output": (1_000_000, 1000),
        # 0.5M slow input tokens x $2 + 0.2M slow output x $10 = $1 + $2
        "speed_credit": (700_000, -300),
    }
    assert invoice.total_cents == 5100
    again, created_again = invoice_close_month(org=org, month=OCT, actor=operator, now=NOV_2)
    assert (again.pk, created_again) == (invoice.pk, False)
    assert Invoice.objects.filter(org=org).count() == 1
    assert OutboxMessage.objects.filter(kind=OutboxKind.INVOICE_PUSH, invoice=invoice).count() == 1
    assert AuditEvent.objects.filter(action="invoice.close", org=org).count() == 1


@pytest.mark.django_db
def test_month_to_date_and_invoice_come_from_the_same_rating(operator, pool, premium_price):
    org = OrganizationFactory()
    _october_usage(org, pool)
    mtd = month_rated_lines(org=org, month=OCT, until=datetime(2026, 11, 1, tzinfo=UTC))
    invoice, _ = invoice_close_month(org=org, month=OCT, actor=operator, now=NOV_2)
    assert total_cents(mtd) == invoice.total_cents


@pytest.mark.django_db
def test_hour_of_a_price_change_is_rated_at_the_new_price(operator, pool, premium_price):
    org = OrganizationFactory()
    change = datetime(2026, 10, 10, 14, tzinfo=UTC)
    price_version_create(pool=pool, effective_from=change, input_micros_per_mtok=4_000_000,
                         output_micros_per_mtok=20_000_000, actor=operator,
                         now=datetime(2026, 10, 10, 13, 59, tzinfo=UTC))
    usage_add(org=org, pool=pool, hour=datetime(2026, 10, 10, 13, tzinfo=UTC), i=1_000_000)
    usage_add(org=org, pool=pool, hour=change, i=1_000_000)
    invoice, _ = invoice_close_month(org=org, month=OCT, actor=operator, now=NOV_2)
    inputs = [ln.amount_cents for ln in invoice.lines.filter(kind="input")]
    assert inputs == [500, 400]


@pytest.mark.django_db
@pytest.mark.parametrize("start", [datetime(2026, 12, 1, 10, 30, tzinfo=UTC),
                                   datetime(2026, 12, 1, 10, 0, 1, tzinfo=UTC)])
def test_price_versions_start_on_a_whole_hour(operator, pool, start):
    with pytest.raises(Unprocessable) as exc:
        price_version_create(pool=pool, effective_from=start, input_micros_per_mtok=1,
                             output_micros_per_mtok=1, actor=operator,
                             now=datetime(2026, 11, 1, tzinfo=UTC))
    assert exc.value.code == "price_not_on_hour"
    assert not PriceVersion.objects.exists()


@pytest.mark.django_db
def test_price_history_is_not_rewritten(operator, pool, premium_price):
    with pytest.raises(Unprocessable) as exc:
        price_version_create(pool=pool, effective_from=datetime(2026, 10, 1, tzinfo=UTC),
                             input_micros_per_mtok=1, output_micros_per_mtok=1, actor=operator,
                             now=datetime(2026, 11, 1, 5, tzinfo=UTC))
    assert exc.value.code == "price_in_past"
    with pytest.raises(Conflict):
        price_version_create(pool=pool, effective_from=premium_price.effective_from,
                             input_micros_per_mtok=1, output_micros_per_mtok=1, actor=operator,
                             now=datetime(2025, 1, 1, tzinfo=UTC))
    with pytest.raises(ProgrammingError, match="append-only"), connection.cursor() as cursor:
        cursor.execute("UPDATE billing_priceversion SET input_micros_per_mtok = 1")


@pytest.mark.django_db
def test_only_ended_months_close(operator):
    org = OrganizationFactory()
    with pytest.raises(Unprocessable) as exc:
        invoice_close_month(org=org, month=date(2026, 11, 1), actor=operator, now=NOV_2)
    assert exc.value.code == "month_not_ended"


@pytest.mark.django_db
def test_zero_invoice_is_settled_and_not_sent_to_stripe(operator):
    org = OrganizationFactory()
    invoice, _ = invoice_close_month(org=org, month=OCT, actor=operator, now=NOV_2)
    assert (invoice.total_cents, invoice.status) == (0, InvoiceStatus.PAID)
    assert not OutboxMessage.objects.filter(invoice=invoice).exists()


@pytest.mark.django_db
def test_beat_close_covers_active_orgs_and_any_org_with_usage(operator, pool):
    active = OrganizationFactory()
    offboarded_with_usage = OrganizationFactory(status=OrgStatus.OFFBOARDED)
    OrganizationFactory(status=OrgStatus.APPLIED)
    usage_add(org=offboarded_with_usage, pool=pool, hour=datetime(2026, 10, 5, tzinfo=UTC), i=5)
    assert invoices_close_previous_month(actor="celery:test", now=NOV_2) == 2
    assert invoices_close_previous_month(actor="celery:test", now=NOV_2) == 0
    assert set(Invoice.objects.values_list("org_id", flat=True)) == {
        active.pk, offboarded_with_usage.pk}


@pytest.mark.django_db
def test_void_then_reissue_makes_a_new_revision(operator, pool):
    org = OrganizationFactory()
    usage_add(org=org, pool=pool, hour=datetime(2026, 10, 5, tzinfo=UTC), i=1_000_000)
    first, _ = invoice_close_month(org=org, month=OCT, actor=operator, now=NOV_2)
    discount_set(org=org, discount_bps=2_000, actor=operator, reason="launch partner")
    second = invoice_reissue(invoice=first, actor=operator, reason="discount agreed late")
    first.refresh_from_db()
    assert first.status == InvoiceStatus.VOID and first.void_reason == "discount agreed late"
    assert (second.revision, second.replaces_id, second.total_cents) == (2, first.pk, 400)
    assert second.number.endswith("-2")
    with pytest.raises(IllegalTransition):
        invoice_void(invoice=first, actor=operator, reason="again")
    assert OutboxMessage.objects.filter(kind=OutboxKind.INVOICE_VOID, invoice=first).exists()


@pytest.mark.django_db(transaction=True)
def test_concurrent_closes_make_one_invoice(operator):
    pool = PoolFactory()
    orgs = [OrganizationFactory() for _ in range(3)]
    for org in orgs:
        usage_add(org=org, pool=pool, hour=datetime(2026, 10, 5, tzinfo=UTC), i=1_000_000)
    barrier = threading.Barrier(8)
    results, errors = [], []

    def close(org):
        try:
            barrier.wait()
            results.append(invoice_close_month(org=org, month=OCT, actor="test", now=NOV_2))
        except Exception as exc:  # noqa: BLE001 - surfaced by the assertion below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=close, args=(orgs[n % 3],)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert Invoice.objects.count() == 3
    assert sum(created for _, created in results) == 3
    assert {inv.pk for inv, _ in results} == set(Invoice.objects.values_list("pk", flat=True))
