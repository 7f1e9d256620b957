"""Billing for owners and billing members; anyone else gets a 404, as from the billing API.
Month to date is rated by the same selector as the monthly invoice; invoices render with
billing's own HTML and PDF renderers."""

from decimal import Decimal

from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from billing import selectors, services, stripe_api
from billing.api.views_org import invoice_html
from billing.models import LineKind
from billing.pdf import invoice_pdf
from billing.periods import month_of
from billing.rating import total_cents
from orgs.models import BILLING_READERS
from portal.access import org_page
from portal.forms import SpendCapForm
from quotas.models import CapacityPool
from sluice.errors import DomainError
from sluice.messages import flash, redirect_at

MICROS_PER_DOLLAR = 1_000_000
billing_page = org_page(page="billing", roles=BILLING_READERS, hidden=True)


@billing_page
def billing(request, membership):
    account = selectors.billing_account_or_default(org=membership.org)
    form = SpendCapForm(initial={
        "spend_cap_dollars": Decimal(account.spend_cap_micros) / MICROS_PER_DOLLAR,
        "alert_thresholds": ", ".join(str(t) for t in account.alert_thresholds)})
    return _page(request, membership, form=form)


def _page(request, membership, *, form, status_code=200):
    org, now = membership.org, timezone.now()
    lines = selectors.month_rated_lines(org=org, month=month_of(now), until=now)
    pools = CapacityPool.objects.in_bulk({ln.pool_id for ln in lines if ln.pool_id})
    return render(request, "portal/billing.html", {
        "org": org, "form": form, "status": services.spend_status(org=org, now=now),
        "lines": [{"label": LineKind(ln.kind).label, "pool": pools.get(ln.pool_id, ""),
                   "tokens": ln.quantity_tokens, "cents": ln.amount_cents,
                   "kind": ln.kind} for ln in lines],
        "total_cents": total_cents(lines), "invoices": selectors.invoices_for_org(org=org),
        "payment_method_added_at": selectors.payment_method_added_at(org=org),
        "back_from_checkout": request.GET.get("setup") == "done",
    }, status=status_code)


@require_POST
@billing_page
def spend_cap(request, membership):
    form = SpendCapForm(request.POST)
    if not form.is_valid():
        return _page(request, membership, form=form, status_code=400)
    try:
        services.spend_cap_set(
            org=membership.org, actor=request.user,
            cap_micros=int(form.cleaned_data["spend_cap_dollars"] * MICROS_PER_DOLLAR),
            thresholds=form.cleaned_data["alert_thresholds"])
    except DomainError as error:
        form.add_error(None, error.message)
        return _page(request, membership, form=form, status_code=error.status)
    flash(request, messages.SUCCESS, "Spend cap and alerts saved.", at="cap")
    return redirect_at("portal:billing", membership.org.slug, at="cap")


@require_POST
@billing_page
def payment_method(request, membership):
    """Off to Stripe Checkout (setup mode) to add or replace the card; back here after."""
    org = membership.org
    back = settings.PUBLIC_URL + reverse("portal:billing", args=[org.slug])
    try:
        url = stripe_api.setup_session_create(
            customer_id=services.stripe_customer_ensure(org=org),
            success_url=f"{back}?setup=done", cancel_url=back)
    except DomainError as error:
        flash(request, messages.ERROR, error.message, at="payment")
        return redirect_at("portal:billing", org.slug, at="payment")
    return redirect(url)


def _invoice(membership, invoice_id: int):
    invoice = selectors.invoice_with_lines(
        queryset=selectors.invoices_for_org(org=membership.org), invoice_id=invoice_id)
    if invoice is None:
        raise Http404("No such invoice.")
    return invoice


@billing_page
def invoice_view(request, membership, invoice_id: int):
    return HttpResponse(invoice_html(_invoice(membership, invoice_id)),
                        content_type="text/html; charset=utf-8")


@billing_page
def invoice_pdf_view(request, membership, invoice_id: int):
    invoice = _invoice(membership, invoice_id)
    response = HttpResponse(invoice_pdf(invoice), content_type="application/pdf")
    response["Content-Disposition"] = f'attachment; filename="{invoice.number}.pdf"'
    return response
