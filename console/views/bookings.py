"""Bookings in the console: each pool's calendar (what allocations and bookings guarantee hour
by hour, what is free, the capacity changes past and scheduled, the bookings), the list of
every booking, an operator's cancel with a reason, and a capacity change that shows at once
the bookings it would break and breaks only those the operator ticks."""

from datetime import timedelta

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.core.paginator import Paginator
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from console import permissions as perm
from console.forms import PoolCapacityForm, ReasonForm
from console.views.pages import PAGE_SIZE, _render
from orgs.models import AuditEvent
from quotas.bookings import booking_cancel
from quotas.ledger import booking_get, capacity_conflicts, pool_bookings, pool_free_series
from quotas.models import BookingState, CapacityPool
from quotas.selectors import pool_get
from quotas.services import pool_capacity_set
from rollout.waitlist import scheduled_waves
from sluice.charts import Limit, Series, TimeChart
from sluice.errors import DomainError
from sluice.forms import form_add_domain_error
from sluice.messages import flash, redirect_at

CALENDAR_DAYS = 14
HOUR = 3600


class BookingCapacityForm(PoolCapacityForm):
    break_bookings = forms.TypedMultipleChoiceField(
        label="Break these bookings (cancelled, refunded in full, their organizations told)",
        coerce=int, required=False, widget=forms.CheckboxSelectMultiple)

    def __init__(self, *args, pool: CapacityPool, conflicts=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["break_bookings"].choices = [(b.pk, str(b.pk)) for b in conflicts]
        preview = reverse("admin:console_pool_capacity_conflicts", args=[pool.pk])
        for name in ("capacity_tps", "prefill_capacity_tps"):
            self.fields[name].widget.attrs.update({
                "hx-get": preview, "hx-trigger": "input changed delay:300ms",
                "hx-target": "#capacity-conflicts", "hx-include": "closest form"})


def _conflicts_for(pool: CapacityPool, data) -> object | None:
    """The bookings a capacity typed in the form would break (None: nothing to judge yet)."""
    try:
        capacity = int(data.get("capacity_tps", ""))
        prefill = data.get("prefill_capacity_tps") or pool.prefill_capacity_tps
        prefill = int(prefill) if prefill else None
    except ValueError:
        return None
    if capacity < 1 or (prefill is not None and prefill < 1):
        return None
    ratio = pool.guaranteeable_ratio
    return capacity_conflicts(
        pool=pool, guaranteeable_tps=CapacityPool.guaranteeable_for(capacity, ratio),
        guaranteeable_input_tps=None if prefill is None
        else CapacityPool.guaranteeable_for(prefill, ratio))


def _calendar_chart(pool, points) -> TimeChart:
    return TimeChart(
        key=f"calendar{pool.pk}", title=f"Next {CALENDAR_DAYS} days, hourly (UTC), at each "
        "hour's busiest instant", unit="tokens/s", times=[p.at for p in points],
        step_seconds=HOUR, limits=[Limit("Guaranteeable", pool.guaranteeable_tps)],
        series=[Series("Allocations", [p.standing_tps for p in points], color="brand"),
                Series("Bookings", [p.booked_tps for p in points], color="violet"),
                Series("Free", [p.output_tps for p in points], color="ok")])


def _calendar(request, site, pool, *, form=None, conflicts=None, status=200):
    now = timezone.now()
    start = now.replace(minute=0, second=0, microsecond=0)
    end = start + timedelta(days=CALENDAR_DAYS)
    points = pool_free_series(pool=pool, start=start, end=end, step=timedelta(hours=1))
    form = form or BookingCapacityForm(
        pool=pool, initial={"capacity_tps": pool.capacity_tps,
                            "prefill_capacity_tps": pool.prefill_capacity_tps},
        auto_id="capacity_%s")
    changes = (AuditEvent.objects.filter(
        action="pool.capacity_set", target_type="quotas.capacitypool", target_id=str(pool.pk),
        created_at__gte=now - timedelta(days=CALENDAR_DAYS)).order_by("-created_at"))
    return _render(request, site, "console/pool_calendar.html", {
        "pool": pool, "chart": _calendar_chart(pool, points), "days": CALENDAR_DAYS,
        "free_now": points[0].output_tps if points else 0,
        "free_least": min((p.output_tps for p in points), default=0),
        "bookings": pool_bookings(pool=pool, since=now).select_related("charge"),
        "changes": changes, "waves": scheduled_waves(pool=pool), "now": now,
        "form": form, "conflicts": conflicts,
        "can_change": request.user.has_perm(perm.CHANGE_CAPACITY),
        "can_cancel": request.user.has_perm(perm.CANCEL_BOOKING),
    }, status=status)


@permission_required(perm.VIEW_BOOKINGS, raise_exception=True)
def pool_calendar(request, *, site, pool_id: int):
    return _calendar(request, site, pool_get(pool_id=pool_id))


@permission_required(perm.VIEW_POOLS, raise_exception=True)
def capacity_conflicts_preview(request, *, site, pool_id: int):
    """htmx, as the operator types a capacity: the bookings it would break, to tick."""
    pool = pool_get(pool_id=pool_id)
    return render(request, "console/_capacity_conflicts.html",
                  {"conflicts": _conflicts_for(pool, request.GET), "pool": pool})


@require_POST
@permission_required(perm.CHANGE_CAPACITY, raise_exception=True)
def pool_calendar_capacity(request, *, site, pool_id: int):
    pool = pool_get(pool_id=pool_id)
    conflicts = _conflicts_for(pool, request.POST)
    form = BookingCapacityForm(request.POST, pool=pool, auto_id="capacity_%s",
                               conflicts=conflicts.bookings if conflicts else ())
    if form.is_valid():
        try:
            pool_capacity_set(pool=pool, actor=request.user, **form.cleaned_data)
        except DomainError as error:
            form_add_domain_error(form=form, error=error)
        else:
            broken = len(form.cleaned_data["break_bookings"])
            tps = form.cleaned_data["capacity_tps"]
            flash(request, messages.SUCCESS, f"{pool} now has {tps:,} tokens/s"
                  + (f"; {broken} booking{'s' if broken > 1 else ''} cancelled and refunded."
                     if broken else "."), at="capacity")
            return redirect_at("admin:console_pool_calendar", pool.pk, at="capacity")
    return _calendar(request, site, pool, form=form, conflicts=conflicts, status=422)


class BookingFilterForm(forms.Form):
    pool = forms.ModelChoiceField(label="Pool", required=False, empty_label="Any",
                                  queryset=CapacityPool.objects.all())
    state = forms.ChoiceField(label="State", required=False,
                              choices=[("", "Any")] + BookingState.choices)
    upcoming = forms.BooleanField(label="Windows not ended yet", required=False, initial=True)


@permission_required(perm.VIEW_BOOKINGS, raise_exception=True)
def booking_list(request, *, site):
    form = BookingFilterForm(request.GET or {"upcoming": True})
    data = form.cleaned_data if form.is_valid() else {}
    bookings = pool_bookings(pool=data.get("pool"), state=data.get("state", ""),
                             since=timezone.now() if data.get("upcoming") else None)
    page = Paginator(bookings.select_related("charge"), PAGE_SIZE).get_page(
        request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return _render(request, site, "console/bookings.html", {
        "form": form, "page": page, "query": query.urlencode(), "now": timezone.now(),
        "can_cancel": request.user.has_perm(perm.CANCEL_BOOKING),
    })


@require_POST
@permission_required(perm.CANCEL_BOOKING, raise_exception=True)
def booking_cancel_view(request, *, site, booking_id: int):
    booking = booking_get(booking_id=booking_id)
    form = ReasonForm(request.POST)
    back = request.POST.get("back") == "calendar"
    place = "capacity" if back else "bookings"
    if not form.is_valid() or not form.cleaned_data["reason"].strip():
        flash(request, messages.ERROR, "Give the organization a reason.", at=place)
    else:
        try:
            booking_cancel(booking=booking, actor=request.user, by_operator=True,
                           reason=form.cleaned_data["reason"].strip())
        except DomainError as error:
            flash(request, messages.ERROR, error.message, at=place)
        else:
            flash(request, messages.SUCCESS, f"Booking #{booking.pk} of {booking.org.name} "
                  "cancelled and refunded in full.", at=place)
    if back:
        return redirect_at("admin:console_pool_calendar", booking.pool_id, at=place)
    return redirect_at("admin:console_bookings", at=place)
