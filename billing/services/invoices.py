"""Monthly close, void, re-issue, and supplements for late usage. The close is idempotent by a
unique constraint: at most one live (not void) invoice per org and month, besides the
supplements that bill usage of a paid month reported after its invoice was issued.

No invoice totals below zero (a constraint holds it). A month whose refunds of bookings exceed
its charges ends with a line "Credit carried to the next invoice" that brings it to zero; the
next invoices of the org (of any month, supplements too) use that credit with a line "Credit
from earlier invoices", up to their own subtotal, until it is spent. The credit is the sum of the
credit lines of the org's live invoices: voiding an invoice gives back the credit it used (or
takes back what it carried), and its re-issue uses or carries it again."""

import logging
from datetime import date, datetime

from django.db import IntegrityError, connection, transaction
from django.db.models import Max, Q
from django.utils import timezone

from billing.events import invoice_issued
from billing.models import Invoice, InvoiceLine, InvoiceStatus, LineKind, OutboxKind
from billing.periods import month_after, month_before, month_bounds, month_of
from billing.rating import RatedLine, credit_lines, lines_not_yet_billed, total_cents
from billing.selectors import (
    billing_discount_bps,
    credit_balance_cents,
    month_invoiced_lines,
    month_rated_lines,
)
from billing.services.outbox import outbox_enqueue
from metering.models import UsageHourly
from metering.partitions import usage_started_at_window
from orgs.models import Organization, OrgStatus
from orgs.services.audit import Actor, audit_record
from quotas.models import CapacityPool
from sluice.errors import IllegalTransition, Unprocessable
from sluice.transactions import nested_atomic

logger = logging.getLogger(__name__)
# The first key of the advisory lock on an org's credit (the second is the org's id).
CREDIT_LOCK_SPACE = 7301
_KIND_LABELS = dict(LineKind.choices)


def _describe(line: RatedLine, pools: dict[int, str]) -> str:
    label = _KIND_LABELS[line.kind]
    if line.description:
        return f"{label} · {line.description}"[:200]
    if line.pool_id is None:
        return label
    return f"{label} · {pools.get(line.pool_id, line.pool_id)}"


def _lines_create(invoice: Invoice, lines: list[RatedLine]) -> None:
    pools = {p.pk: str(p) for p in CapacityPool.objects.filter(
        pk__in={ln.pool_id for ln in lines if ln.pool_id})}
    InvoiceLine.objects.bulk_create(
        InvoiceLine(invoice=invoice, position=n, kind=ln.kind, pool_id=ln.pool_id,
                    price_version_id=ln.price_version_id, booking_id=ln.booking_id,
                    description=_describe(ln, pools),
                    quantity_tokens=ln.quantity_tokens,
                    unit_micros_per_mtok=ln.unit_micros_per_mtok,
                    amount_cents=ln.amount_cents)
        for n, ln in enumerate(lines, start=1))


def _credit_lock(org: Organization) -> None:
    """One invoice of an org at a time reads and moves its credit (two months closed at once
    must not both use it). A transaction-level advisory lock, taken last: every other lock an
    invoice takes comes before it."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [CREDIT_LOCK_SPACE, org.pk])


def _with_credit(org: Organization, lines: list[RatedLine]) -> list[RatedLine]:
    """`lines` and what keeps their total from going below zero: Stripe never gets a negative
    invoice (billing.rating.credit_lines)."""
    _credit_lock(org)
    return lines + credit_lines(subtotal_cents=total_cents(lines),
                                balance_cents=credit_balance_cents(org=org))


def _invoice_insert(*, org: Organization, month: date, lines: list[RatedLine],
                    replaces: Invoice | None = None,
                    supplements: Invoice | None = None) -> Invoice:
    revision = (Invoice.objects.filter(org=org, period_start=month)
                .aggregate(m=Max("revision"))["m"] or 0) + 1
    lines = _with_credit(org, lines)
    total = total_cents(lines)
    invoice = Invoice.objects.create(
        org=org, period_start=month, period_end=month_after(month), revision=revision,
        number=f"SL-{org.pk:05d}-{month:%Y%m}-{revision}", total_cents=total, replaces=replaces,
        supplements=supplements,
        # Nothing to collect: a zero invoice is settled the moment it exists.
        status=InvoiceStatus.OPEN if total > 0 else InvoiceStatus.PAID,
        paid_at=None if total > 0 else timezone.now())
    _lines_create(invoice, lines)
    if total > 0:
        outbox_enqueue(kind=OutboxKind.INVOICE_PUSH, org=org, invoice=invoice)
    invoice_issued.emit(invoice=invoice)
    return invoice


def _month_closable(month: date, now: datetime) -> None:
    if month.day != 1 or month >= month_of(now):
        raise Unprocessable("Only a month that has ended can be closed.",
                            code="month_not_ended", details={"month": month.isoformat()})


@transaction.atomic(durable=True)
def invoice_close_month(*, org: Organization, month: date, actor: Actor,
                        now: datetime | None = None) -> tuple[Invoice, bool]:
    """Rate `month` for `org` into an invoice. Returns (invoice, created). A second or concurrent
    close finds the live invoice through the unique constraint and returns it unchanged."""
    _month_closable(month, now or timezone.now())
    live = (Q(org=org, period_start=month, supplements__isnull=True)
            & ~Q(status=InvoiceStatus.VOID))
    existing = Invoice.objects.filter(live).first()
    if existing:
        return existing, False
    try:
        with transaction.atomic():
            invoice = _invoice_insert(org=org, month=month,
                                      lines=month_rated_lines(org=org, month=month))
    except IntegrityError:
        # Lost the race to a concurrent close: its invoice is the one.
        return Invoice.objects.get(live), False
    audit_record(actor=actor, action="invoice.close", target=invoice, org=org,
                 after={"number": invoice.number, "total_cents": invoice.total_cents})
    return invoice, True


def _orgs_to_close(month: date):
    start, end = month_bounds(month)
    with_usage = UsageHourly.objects.filter(hour__gte=start, hour__lt=end).values("org_id")
    return Organization.objects.filter(
        Q(status__in=[OrgStatus.ACTIVE, OrgStatus.SUSPENDED]) | Q(pk__in=with_usage)
    ).order_by("pk")


def invoices_close_previous_month(*, actor: Actor, now: datetime | None = None) -> int:
    """Beat, on the 1st: close last month for every active or suspended org and every org that
    used anything. One transaction per org, so one failure does not hold back the others."""
    now = now or timezone.now()
    month = month_before(month_of(now))
    created = 0
    for org in _orgs_to_close(month):
        try:
            created += invoice_close_month(org=org, month=month, actor=actor, now=now)[1]
        except Exception:
            # Logged for an operator, who closes it with the idempotent close endpoint or
            # admin; the other orgs' invoices must not wait for this one.
            logger.exception("closing %s for org %s failed", month, org.pk)
    return created


def _invoice_locked(invoice: Invoice) -> Invoice:
    return Invoice.objects.select_for_update().get(pk=invoice.pk)


@nested_atomic
def _invoice_void_locked(*, invoice: Invoice, actor: Actor, reason: str) -> Invoice:
    if invoice.status != InvoiceStatus.OPEN:
        raise IllegalTransition(f"A {invoice.status} invoice cannot be voided.",
                                details={"status": invoice.status})
    invoice.status, invoice.voided_at, invoice.void_reason = (
        InvoiceStatus.VOID, timezone.now(), reason)
    invoice.save(update_fields=["status", "voided_at", "void_reason"])
    outbox_enqueue(kind=OutboxKind.INVOICE_VOID, org=invoice.org, invoice=invoice)
    audit_record(actor=actor, action="invoice.void", target=invoice, org=invoice.org,
                 before={"status": InvoiceStatus.OPEN}, after={"status": InvoiceStatus.VOID},
                 reason=reason)
    return invoice


@transaction.atomic(durable=True)
def invoice_void(*, invoice: Invoice, actor: Actor, reason: str) -> Invoice:
    return _invoice_void_locked(invoice=_invoice_locked(invoice), actor=actor, reason=reason)


@transaction.atomic(durable=True)
def invoice_reissue(*, invoice: Invoice, actor: Actor, reason: str) -> Invoice:
    """Void `invoice` and close its month again, rated from today's data (e.g. after a discount
    was corrected). The new invoice is a new revision that says what it replaces."""
    locked = _invoice_locked(invoice)
    if locked.supplements_id:
        raise IllegalTransition("A supplement is not re-issued: void it, then bill the month's "
                                "late usage again.", details={"supplements": locked.number})
    old = _invoice_void_locked(invoice=locked, actor=actor, reason=reason)
    new = _invoice_insert(org=old.org, month=old.period_start, replaces=old,
                          lines=month_rated_lines(org=old.org, month=old.period_start))
    audit_record(actor=actor, action="invoice.reissue", target=new, org=old.org,
                 after={"number": new.number, "replaces": old.number,
                        "total_cents": new.total_cents}, reason=reason)
    return new


@transaction.atomic(durable=True)
def invoice_bill_late_usage(*, invoice: Invoice, actor: Actor, reason: str = "") -> Invoice:
    """Bill, on a supplementary invoice, the usage of `invoice`'s month reported after the
    month's paid invoice (and any earlier supplement) was issued: what the month rated now
    holds beyond what its live invoices bill, line by line, at today's discount. An open
    invoice is re-issued instead (one invoice, not two). Concurrent calls bill it once: the
    month's invoice is locked while its lines are compared."""
    main = _invoice_locked(invoice.supplements or invoice)
    if main.status != InvoiceStatus.PAID:
        hint = " Re-issue it: it is not paid yet." if main.status == InvoiceStatus.OPEN else ""
        raise IllegalTransition(f"Late usage is billed after a paid invoice, and {main.number} "
                                f"is {main.status}.{hint}", details={"status": main.status})
    org, month = main.org, main.period_start
    lines = lines_not_yet_billed(rated=month_rated_lines(org=org, month=month),
                                 billed=month_invoiced_lines(org=org, month=month),
                                 discount_bps=billing_discount_bps(org=org))
    if not lines:
        raise Unprocessable(f"{month:%B %Y} holds no usage that its invoices do not bill.",
                            code="no_late_usage", details={"invoice": main.number})
    if any(ln.quantity_tokens < 0 for ln in lines):
        raise Unprocessable(f"{month:%B %Y} now holds less usage than its invoices bill: "
                            "a correction, not late usage.", code="usage_decreased",
                            details={"invoice": main.number})
    supplement = _invoice_insert(org=org, month=month, lines=lines, supplements=main)
    audit_record(actor=actor, action="invoice.late_usage", target=supplement, org=org,
                 after={"number": supplement.number, "supplements": main.number,
                        "total_cents": supplement.total_cents}, reason=reason)
    return supplement


def invoices_bill_late_usage(*, actor: Actor, now: datetime | None = None) -> int:
    """Beat, on the 1st after the close: bill on a supplement the late usage of every paid month
    that the hook may still receive usage for (events up to the raw retention old), as Stripe
    carries pending items into the next invoice: one supplement per month and run, not one per
    late report. One transaction per invoice; a month with nothing late is skipped. Open
    invoices are left to a re-issue (reconcile lists them). Safe to run twice."""
    now = now or timezone.now()
    earliest, _ = usage_started_at_window(now=now)
    paid = (Invoice.objects.filter(status=InvoiceStatus.PAID, supplements__isnull=True,
                                   period_start__gte=month_of(earliest),
                                   period_start__lt=month_of(now))
            .select_related("org").order_by("period_start", "pk"))
    billed = 0
    for invoice in paid:
        try:
            invoice_bill_late_usage(invoice=invoice, actor=actor,
                                    reason="late usage, billed at the monthly close")
            billed += 1
        except Unprocessable as exc:
            if exc.code != "no_late_usage":
                logger.warning("late usage of %s not billed: %s", invoice.number, exc.message)
        except Exception:
            logger.exception("billing the late usage of %s failed", invoice.number)
    return billed
