"""Console pages for money: the price book (effective-dated versions per pool) and billing
problems (orgs in dunning, outbox dead letters with retry, Stripe events that failed). Changes
go through billing.services; support staff read only."""

from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.http import Http404
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from billing.models import OutboxMessage, StripeEvent, StripeEventStatus
from billing.selectors import (
    accounts_in_dunning,
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


@permission_required(perm.VIEW_PRICES, raise_exception=True)
def price_book_page(request, *, site, form=None, status=200):
    by_pool: dict = {}
    for version in price_book():
        by_pool.setdefault(version.pool, []).append(version)
    return _render(request, site, "console/price_book.html", {
        "by_pool": list(by_pool.items()), "form": form or PriceVersionForm(),
        "can_change": request.user.has_perm(perm.ADD_PRICE),
    }, status=status)


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
            messages.success(request, f"New prices for {version.pool} from "
                                      f"{version.effective_from:%Y-%m-%d %H:%M} UTC.")
            return redirect("admin:console_prices")
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
        messages.error(request, error.message)
    else:
        messages.success(request, f"Outbox message #{message.pk} queued again.")
    return redirect("admin:console_billing_problems")


@require_POST
@permission_required(perm.REPROCESS_STRIPE_EVENT, raise_exception=True)
def stripe_event_reprocess(request, *, site, event_id: int):
    event = StripeEvent.objects.filter(pk=event_id, status=StripeEventStatus.FAILED).first()
    if event is None:
        raise Http404("No such failed Stripe event.")
    try:
        result = stripe_event_retry(event=event, actor=request.user)
    except DomainError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, f"Stripe event {event.event_id}: {result}.")
    return redirect("admin:console_billing_problems")
