"""Booking capacity: per pool the org holds an allocation in, the guaranteed tokens/s free over
the next 14 days (a chart), a form that quotes then confirms, and the org's bookings with their
state and cost. Owners, admins and billing members read; owners and admins book and cancel
(billing/bookings.py)."""

from datetime import timedelta

from django.contrib import messages
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_POST

from billing.bookings import BOOKING_MANAGERS, BOOKING_READERS, REFUND_RULE, booking_quote
from billing.services import booking_confirm
from portal.access import flash_result, org_page
from portal.forms import BookingForm
from quotas.bookings import booking_cancel
from quotas.ledger import org_booking_get, org_bookings, pool_free_series
from quotas.selectors import org_allocations
from sluice.charts import Limit, Series, TimeChart
from sluice.errors import DomainError, NotFound
from sluice.messages import flash, redirect_at

CHART_DAYS = 14
HOUR = 3600


def _rows(bookings, now) -> list[dict]:
    return [{"booking": b, "phase": b.phase_at(now), "charge": getattr(b, "charge", None),
             "cancellable": b.is_live and now < b.starts_at} for b in bookings]


@org_page(page="bookings", roles=BOOKING_READERS, hidden=True)
def bookings(request, membership):
    org, now = membership.org, timezone.now()
    return render(request, "portal/bookings.html", {
        "org": org, "allocations": list(org_allocations(org=org)),
        "rows": _rows(org_bookings(org=org).select_related("charge"), now),
        "can_book": membership.role in BOOKING_MANAGERS, "refund_rule": REFUND_RULE,
    })


def _free_chart(pool, now) -> TimeChart:
    start = now.replace(minute=0, second=0, microsecond=0)
    points = pool_free_series(pool=pool, start=start, end=start + timedelta(days=CHART_DAYS),
                              step=timedelta(hours=1))
    series = [Series("Free output tokens/s", [p.output_tps for p in points], color="ok",
                     summary="average")]
    if pool.meters_input_apart:
        series.append(Series("Free input tokens/s", [p.input_tps for p in points],
                             color="violet"))
    return TimeChart(key="free", title=f"Free to book, next {CHART_DAYS} days (hourly, UTC)",
                     unit="tokens/s", times=[p.at for p in points], step_seconds=HOUR,
                     series=series, limits=[Limit("Guaranteeable", pool.guaranteeable_tps)])


def _allocation(org, pool_id: int):
    """The org's allocation in force in the pool: a pool it holds none in is a 404 here."""
    allocation = org_allocations(org=org).filter(pool_id=pool_id).first()
    if allocation is None:
        raise NotFound("No such pool.")
    return allocation


def _pool_page(request, membership, pool_id: int, *, form=None, quote=None, status=200):
    org, now = membership.org, timezone.now()
    allocation = _allocation(org, pool_id)
    pool = allocation.pool
    start = (now + timedelta(hours=1)).replace(minute=0, second=0, microsecond=0)
    form = form or BookingForm(pool=pool, initial={"starts_at": start,
                                                   "ends_at": start + timedelta(hours=2)})
    return render(request, "portal/booking_pool.html", {
        "org": org, "pool": pool, "allocation": allocation, "form": form, "quote": quote,
        "chart": _free_chart(pool, now), "refund_rule": REFUND_RULE,
        "rows": _rows(org_bookings(org=org, pool=pool).select_related("charge"), now),
        "can_book": membership.role in BOOKING_MANAGERS,
    }, status=status)


@org_page(page="bookings", roles=BOOKING_READERS, hidden=True)
def booking_pool(request, membership, pool_id: int):
    if request.method != "POST":
        return _pool_page(request, membership, pool_id)
    if membership.role not in BOOKING_MANAGERS:
        raise NotFound("No such page.")
    pool = _allocation(membership.org, pool_id).pool
    form = BookingForm(request.POST, pool=pool)
    if not form.is_valid():
        return _pool_page(request, membership, pool_id, form=form, status=400)
    try:
        if request.POST.get("action") == "confirm":
            booking = booking_confirm(org=membership.org, pool=pool, ask=form.ask(),
                                      actor=request.user,
                                      quote_micros=_int(request.POST.get("quote_micros")))
        else:
            quote = booking_quote(org=membership.org, pool=pool, ask=form.ask())
            return _pool_page(request, membership, pool_id, form=form, quote=quote)
    except DomainError as error:
        form.add_error(None, error.message)
        return _pool_page(request, membership, pool_id, form=form, status=error.status)
    flash(request, messages.SUCCESS, f"Booked: {booking}.", at="mine")
    return redirect_at("portal:booking_pool", membership.org.slug, pool.pk, at="mine")


def _int(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


@require_POST
@org_page(page="bookings", roles=BOOKING_MANAGERS, hidden=True)
def booking_cancel_view(request, membership, booking_id: int):
    booking = org_booking_get(org=membership.org, booking_id=booking_id)
    flash_result(request, lambda: booking_cancel(booking=booking, actor=request.user,
                                                 reason="cancelled by the organization"),
                 "The booking was cancelled; the refund is on this month's invoice.",
                 at="mine")
    return redirect_at("portal:booking_pool", membership.org.slug, booking.pool_id, at="mine")
