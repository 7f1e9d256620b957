"""Console pages for money: the price book (effective-dated versions per pool) and billing
problems (orgs in dunning, outbox dead letters with retry, Stripe events that failed). Changes
go through billing.services; support staff read only."""

from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.http import Http404, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_POST

from billing.api.views_org import invoice_html
from billing.models import Invoice, OutboxMessage, StripeEvent, StripeEventStatus
from billing.selectors import (
    accounts_in_dunning,
    invoice_with_lines,
    outbox_dead_letters,
    price_book,
    stripe_events_failed,
)
from billing.services import outbox_retry, price_version_create, stripe_event_retry
from console import permissions as perm
from console.forms import PriceVersionForm
from console.views.pages import PAGE_SIZE, _render
from sluice.errors import DomainError
from sluice.forms import form_add_domain_error
from sluice.messages import flash, redirect_at


def _price_rows(versions, now) -> list[dict]:
    """The book per pool, each version marked: the one in force now for everyone (or for its
    org, a negotiated rate), those scheduled, and the superseded ones."""
    by_pool: dict = {}
    for version in versions:
        by_pool.setdefault(version.pool, []).append(version)
    pools = []
    for pool, rows in by_pool.items():
        in_force = {}
        for version in rows:  # per (pool, org) in start order: the last started one wins
            if version.effective_from <= now:
                in_force[version.org_id] = version.pk
        pools.append({"pool": pool, "place": f"prices-{pool.pk}", "versions": [
            {"version": v, "state": "in force" if in_force.get(v.org_id) == v.pk
             else "scheduled" if v.effective_from > now else "superseded"}
            for v in sorted(rows, key=lambda v: (v.org_id or 0, -v.effective_from.timestamp()))
        ]})
    return pools


@permission_required(perm.VIEW_PRICES, raise_exception=True)
def price_book_page(request, *, site, form=None, status=200):
    return _render(request, site, "console/price_book.html", {
        "pools": _price_rows(price_book(), timezone.now()),
        "form": form or PriceVersionForm(), "can_change": request.user.has_perm(perm.ADD_PRICE),
    }, status=status)


@permission_required(perm.VIEW_INVOICES, raise_exception=True)
def invoice_page(request, *, site, invoice_id: int):
    """An invoice as the org sees it (billing's own renderer)."""
    invoice = invoice_with_lines(queryset=Invoice.objects.all(), invoice_id=invoice_id)
    if invoice is None:
        raise Http404("No such invoice.")
    return HttpResponse(invoice_html(invoice), content_type="text/html; charset=utf-8")


@require_POST
@permission_required(perm.ADD_PRICE, raise_exception=True)
def price_version_add(request, *, site):
    form = PriceVersionForm(request.POST)
    if form.is_valid():
        try:
            version = price_version_create(actor=request.user, **form.cleaned_data)
        except DomainError as error:
            form_add_domain_error(form=form, error=error)
        else:
            flash(request, messages.SUCCESS, f"New prices for {version.pool} from "
                                             f"{version.effective_from:%Y-%m-%d %H:%M} UTC.",
                  at=f"prices-{version.pool_id}")
            return redirect_at("admin:console_prices", at=f"prices-{version.pool_id}")
    return price_book_page(request, site=site, form=form, status=422)


@permission_required(perm.VIEW_BILLING_PROBLEMS, raise_exception=True)
def billing_problems(request, *, site):
    return _render(request, site, "console/billing_problems.html", {
        "dunning": accounts_in_dunning()[:PAGE_SIZE],
        "dead_letters": outbox_dead_letters()[:PAGE_SIZE],
        "failed_events": stripe_events_failed()[:PAGE_SIZE],
        "can_retry": request.user.has_perm(perm.RETRY_OUTBOX),
        "can_reprocess": request.user.has_perm(perm.REPROCESS_STRIPE_EVENT),
    })


@require_POST
@permission_required(perm.RETRY_OUTBOX, raise_exception=True)
def outbox_retry_view(request, *, site, message_id: int):
    message = OutboxMessage.objects.filter(pk=message_id).first()
    if message is None:
        raise Http404("No such outbox message.")
    try:
        outbox_retry(message=message, actor=request.user)
    except DomainError as error:
        flash(request, messages.ERROR, error.message, at="dead-letters")
    else:
        flash(request, messages.SUCCESS, f"Outbox message #{message.pk} queued again.",
              at="dead-letters")
    return redirect_at("admin:console_billing_problems", at="dead-letters")


@require_POST
@permission_required(perm.REPROCESS_STRIPE_EVENT, raise_exception=True)
def stripe_event_reprocess(request, *, site, event_id: int):
    event = StripeEvent.objects.filter(pk=event_id, status=StripeEventStatus.FAILED).first()
    if event is None:
        raise Http404("No such failed Stripe event.")
    try:
        result = stripe_event_retry(event=event, actor=request.user)
    except DomainError as error:
        flash(request, messages.ERROR, error.message, at="failed-events")
    else:
        flash(request, messages.SUCCESS, f"Stripe event {event.event_id}: {result}.",
              at="failed-events")
    return redirect_at("admin:console_billing_problems", at="failed-events")
