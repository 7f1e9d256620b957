"""Compare our invoices with Stripe's, and with the usage their month holds now, and list every
difference. Read-only on both sides: an operator decides what to do (retry a dead letter,
replay a missed webhook, void, or reissue an open invoice whose month received usage after it
was issued; a paid one cannot be voided, and its difference is not billed by anything here
yet)."""

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date

from billing import stripe_api
from billing.models import Invoice, InvoiceStatus, LineKind, OutboxStatus
from billing.rating import total_cents
from billing.selectors import month_rated_lines

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


def _usage_of(lines) -> dict[tuple, int]:
    """Tokens per (kind, pool, price version) of invoice lines or rated lines: what was used,
    whatever the discount (which the invoice does not record, and may have changed since)."""
    return {(str(ln.kind), ln.pool_id, ln.price_version_id): ln.quantity_tokens
            for ln in lines if ln.kind != LineKind.DISCOUNT}


def _usage_since_close(invoices) -> Iterator[Difference]:
    """Live invoices (zero ones too) whose month now holds other usage than they bill: usage
    reported after the close (the hook accepts events up to the raw retention)."""
    for invoice in (invoices.exclude(status=InvoiceStatus.VOID).select_related("org")
                    .prefetch_related("lines")):
        billed = _usage_of(invoice.lines.all())
        lines = month_rated_lines(org=invoice.org, month=invoice.period_start)
        now = _usage_of(lines)
        if now != billed:
            more = sum(q for (kind, *_), q in now.items() if kind in _TOKEN_KINDS) - sum(
                q for (kind, *_), q in billed.items() if kind in _TOKEN_KINDS)
            yield Difference(invoice.number, f"usage reported after the close: {more:+,} "
                             f"tokens; rated again now: {total_cents(lines)} cents",
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
