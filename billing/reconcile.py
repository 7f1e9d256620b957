"""Compare our invoices with Stripe's, and with the usage their month holds now, and list every
difference. Read-only on both sides: an operator decides what to do (retry a dead letter,
replay a missed webhook, void, reissue an open invoice whose month received usage after it
was issued, or bill a paid one's on a supplement: `invoice_bill_late_usage`)."""

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date

from billing import stripe_api
from billing.models import Invoice, InvoiceStatus, LineKind, OutboxStatus
from billing.rating import total_cents, usage_billed
from billing.selectors import month_invoiced_lines, month_rated_lines

# Our status -> the Stripe statuses that agree with it.
AGREEING = {
    InvoiceStatus.OPEN: {"open"},
    InvoiceStatus.PAID: {"paid"},
    InvoiceStatus.VOID: {"void"},
}


@dataclass(frozen=True)
class Difference:
    invoice: str
    problem: str
    ours: str
    stripe: str


def _compare(invoice: Invoice) -> Iterator[Difference]:
    remote = stripe_api.invoice_retrieve(stripe_invoice_id=invoice.stripe_invoice_id)
    if remote is None:
        yield Difference(invoice.number, "missing in Stripe", invoice.stripe_invoice_id, "-")
        return
    if remote.status not in AGREEING[invoice.status]:
        yield Difference(invoice.number, "status differs", invoice.status, remote.status)
    if invoice.status != InvoiceStatus.VOID and remote.total_cents != invoice.total_cents:
        yield Difference(invoice.number, "total differs", str(invoice.total_cents),
                         str(remote.total_cents))
    if remote.metadata.get("sluice_invoice_id") != str(invoice.pk):
        yield Difference(invoice.number, "belongs to another invoice",
                         str(invoice.pk), remote.metadata.get("sluice_invoice_id", "-"))


# Lines that count tokens once each (the premium and speed-credit lines count them again).
_TOKEN_KINDS = (LineKind.INPUT, LineKind.CACHED_INPUT, LineKind.OUTPUT)


def _tokens(usage: dict[tuple, tuple[int, int]]) -> int:
    return sum(tokens for (kind, *_), (tokens, _cents) in usage.items() if kind in _TOKEN_KINDS)


def _usage_since_close(invoices) -> Iterator[Difference]:
    """Months whose live invoice (zero ones too) and its supplements bill other usage than the
    month holds now: usage reported after the close (the hook accepts events up to the raw
    retention). Listed on the month's invoice, with what settles it."""
    for invoice in (invoices.exclude(status=InvoiceStatus.VOID)
                    .filter(supplements__isnull=True).select_related("org")):
        billed = usage_billed(month_invoiced_lines(org=invoice.org, month=invoice.period_start))
        rated = month_rated_lines(org=invoice.org, month=invoice.period_start)
        now = usage_billed(rated)
        if {k: t for k, (t, _) in now.items()} != {k: t for k, (t, _) in billed.items()}:
            action = ("re-issue it" if invoice.status == InvoiceStatus.OPEN
                      else "bill it on a supplement (late usage)")
            yield Difference(invoice.number, f"usage reported after the close: "
                             f"{_tokens(now) - _tokens(billed):+,} tokens; rated again now: "
                             f"{total_cents(rated)} cents; {action}",
                             str(invoice.total_cents), "-")


def reconcile(*, month: date | None = None) -> list[Difference]:
    every = Invoice.objects.order_by("period_start", "pk")
    if month is not None:
        every = every.filter(period_start=month)
    invoices = every.filter(total_cents__gt=0)
    differences = list(_usage_since_close(every))
    for invoice in invoices.prefetch_related("outbox_messages"):
        if invoice.stripe_invoice_id:
            differences.extend(_compare(invoice))
        elif invoice.status != InvoiceStatus.VOID:
            stuck = [m.status for m in invoice.outbox_messages.all()
                     if m.status != OutboxStatus.DONE]
            ours = f"outbox {','.join(stuck)}" if stuck else "outbox done, no Stripe id"
            differences.append(Difference(invoice.number, "not in Stripe yet", ours, "-"))
    return differences
