"""Invoice PDF with fpdf2 (pure Python, from PyPI; no system libraries). Same data and wording
as the HTML rendering (templates/billing/invoice.html)."""

from datetime import UTC, datetime, time

from fpdf import FPDF
from fpdf.fonts import FontFace

from billing.models import Invoice
from billing.money import format_cents, format_per_mtok
from metering.selectors import usage_interrupted_requests

ROUNDING_NOTE = (
    "Each line is the exact sum of its tokens at the prices in force for each hour, rounded once "
    "to the nearest cent (halves away from zero). The speed credit returns the fast-tier premium "
    "on tokens that were not delivered at the tier's promised speed.")


def _latin1(text: str) -> str:
    # The built-in PDF fonts cover Latin-1 only; anything else prints as "?".
    return text.encode("latin-1", "replace").decode("latin-1")


def _header(pdf: FPDF, invoice: Invoice) -> None:
    pdf.set_font("Helvetica", "B", 16)
    pdf.cell(text=_latin1(f"Invoice {invoice.number}"), new_x="LMARGIN", new_y="NEXT")
    pdf.set_font("Helvetica", size=10)
    replaces = f" - replaces {invoice.replaces.number}" if invoice.replaces_id else ""
    texts = [invoice.org.name,
             f"Period {invoice.period_start:%Y-%m-%d} to {invoice.period_end:%Y-%m-%d} "
             "(UTC, end exclusive)",
             f"Issued {invoice.issued_at:%Y-%m-%d} - {invoice.get_status_display()}{replaces}"]
    if invoice.supplements_id:
        texts.append(f"Late usage: usage of this period reported after invoice "
                     f"{invoice.supplements.number} was issued, billed in addition to it")
    for text in texts:
        pdf.cell(text=_latin1(text), new_x="LMARGIN", new_y="NEXT")
    pdf.ln(4)


def interrupted_note(invoice: Invoice) -> str | None:
    """What the invoice says of the period's interrupted requests (docs/hook.md, Leases), if
    it had any."""
    start = datetime.combine(invoice.period_start, time(), tzinfo=UTC)
    end = datetime.combine(invoice.period_end, time(), tzinfo=UTC)
    n = usage_interrupted_requests(org=invoice.org, start=start, end=end)
    if not n:
        return None
    return (f"Of this period's requests, {n:,} were interrupted (the gateway serving them "
            "stopped mid-stream): billed at list price, without premium, for the output "
            "tokens delivered up to their last progress report.")


def invoice_pdf(invoice: Invoice) -> bytes:
    pdf = FPDF(format="A4")
    pdf.set_title(f"Invoice {invoice.number}")
    pdf.add_page()
    _header(pdf, invoice)
    pdf.set_font("Helvetica", size=9)
    with pdf.table(col_widths=(50, 16, 18, 16), text_align=("LEFT", "RIGHT", "RIGHT", "RIGHT"),
                   headings_style=FontFace(emphasis="BOLD")) as table:
        table.row(["Description", "Tokens", "Unit price", "Amount"])
        for line in invoice.lines.all():
            table.row([_latin1(line.description),
                       f"{line.quantity_tokens:,}" if line.quantity_tokens else "",
                       format_per_mtok(line.unit_micros_per_mtok),
                       format_cents(line.amount_cents, minus="-")])
        table.row([f"Total ({invoice.currency.upper()})", "", "",
                   format_cents(invoice.total_cents, minus="-")])
    pdf.ln(4)
    if (note := interrupted_note(invoice)) is not None:
        pdf.multi_cell(0, text=_latin1(note), new_x="LMARGIN", new_y="NEXT")
        pdf.ln(2)
    pdf.multi_cell(0, text=ROUNDING_NOTE)
    return bytes(pdf.output())
