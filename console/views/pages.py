"""The console's own pages. Each is wrapped by ConsoleSite.admin_view (staff with a verified
second factor); changes need the operator permissions of console.permissions."""

from datetime import timedelta
from urllib.parse import urlencode

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.core.paginator import Paginator
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_POST

from admission.selectors import queues_now
from billing.selectors import billing_problem_counts, invoices_for_org
from console import permissions as perm
from console.charts import org_usage_charts, pool_use_charts, pool_wait_charts
from console.forms import (
    AllocationChangeForm,
    AllocationGrantForm,
    LifecycleForm,
    PoolAdmissionForm,
    PoolCapacityForm,
    PoolSettingsForm,
)
from console.selectors import (
    allocation_get,
    org_get,
    org_search,
    orgs_by_status,
    pools_live_use,
    pools_speed_board,
)
from console.selectors import (
    audit_search as audit_events,
)
from metering.selectors import (
    SPEED_WINDOW,
    delivered_speed,
    org_usage_buckets,
    pools_wait_series,
)
from orgs.models import OrgStatus
from orgs.selectors import org_api_keys, org_members
from orgs.services.lifecycle import org_allowed_actions, org_transition
from quotas.ledger import bookings_relying_on
from quotas.models import CapacityPool
from quotas.selectors import org_allocations, pool_capacity_summaries, pool_get
from quotas.services import allocation_change, pool_capacity_set, pool_settings_set
from quotas.services import allocation_end as allocation_end_service
from quotas.services import allocation_grant as allocation_grant_service
from rollout.models import PoolAdmission
from rollout.quota_requests import AUTO_APPROVAL_FIELDS
from rollout.selectors import next_scheduled_wave, org_quota_requests
from rollout.waitlist import waitlist_lengths
from rollout.waves import pool_admission_set
from sluice.errors import DomainError
from sluice.forms import form_add_domain_error
from sluice.messages import flash, redirect_at

PAGE_SIZE = 50
POOL_SETTINGS = ("guaranteeable_ratio", "limiter_failure_policy", "speed_floor_output_tps",
                 "ttft_ceiling_ms", "output_estimate_default", "output_estimate_floor",
                 "lease_ttl_seconds", "queue_max_wait_ms")

# Console navigation, in menu order: (url name, label, permission). Domains add their pages here
# (vetting queue, waves, quota requests, price book...).
CONSOLE_NAV = [
    ("admin:index", "Dashboard", None),
    ("admin:console_orgs", "Organizations", perm.VIEW_ORGS),
    ("admin:console_vetting", "Vetting", perm.VIEW_APPLICATIONS),
    ("admin:console_waves", "Waves", perm.VIEW_WAVES),
    ("admin:console_quota_requests", "Quota requests", perm.VIEW_QUOTA_REQUESTS),
    ("admin:console_pools", "Pools", perm.VIEW_POOLS),
    ("admin:console_bookings", "Bookings", perm.VIEW_BOOKINGS),
    ("admin:console_prices", "Price book", perm.VIEW_PRICES),
    ("admin:console_gateway_tokens", "Gateway tokens", perm.VIEW_GATEWAY_TOKENS),
    ("admin:console_billing_problems", "Billing problems", perm.VIEW_BILLING_PROBLEMS),
    ("admin:console_audit", "Audit log", perm.VIEW_AUDIT),
]

LIFECYCLE_LABELS = {
    "review_start": "Start review", "approve": "Approve", "reject": "Reject", "admit": "Admit",
    "suspend": "Suspend", "restore": "Restore", "offboard": "Offboard",
    "reapply": "Reopen application",
}
def _render(request, site, template: str, context: dict, status: int = 200):
    nav = [{"url": name, "label": label} for name, label, needed in CONSOLE_NAV
           if needed is None or request.user.has_perm(needed)]
    return render(request, template, {**site.each_context(request), "console_nav": nav,
                                      **context}, status=status)


# The dashboard lists the busiest organizations of each pool; the rest are on the org pages.
BOARD_ORGS = 10


def dashboard(request, *, site):
    now = timezone.now()
    by_status = orgs_by_status()
    live = pools_live_use(now=now)
    queued = waitlist_lengths()
    board = pools_speed_board(now=now)
    pool_objects = CapacityPool.objects.in_bulk()
    summaries = pool_capacity_summaries()
    admission_queues = queues_now([s.pool_id for s in summaries])
    wait_since = now - timedelta(hours=1)
    waits = pools_wait_series(since=wait_since, bucket=timedelta(minutes=5), until=now)
    pools = []
    for summary in summaries:
        entry = board.get(summary.pool_id, {"speed": None, "orgs": []})
        # The pool's use over the hour is written three times (the figure, the chart's
        # average, the speed table's total): all from the chart's series, so they agree even
        # while usage arrives between the page's queries.
        used = live[summary.pool_id]["hour_avg"]
        pools.append({"summary": summary, "pool": pool_objects[summary.pool_id],
                      "live": live[summary.pool_id], "used_tps": used,
                      "used_share": used / summary.guaranteed_tps if summary.guaranteed_tps
                      else None,
                      "charts": [*pool_use_charts(summary=summary, live=live[summary.pool_id]),
                                 *pool_wait_charts(pool=pool_objects[summary.pool_id],
                                                   waits=waits.get(summary.pool_id),
                                                   since=wait_since)],
                      "queued": queued.get(summary.pool_id, 0), "speed": entry["speed"],
                      "orgs": entry["orgs"][:BOARD_ORGS],
                      "admission_queue": admission_queues.get(summary.pool_id),
                      "more_orgs": max(len(entry["orgs"]) - BOARD_ORGS, 0)})
    approved = next(row["value"] for row in by_status if row["status"] == OrgStatus.APPROVED)
    waitlisted = sum(queued.values())
    return _render(request, site, "console/dashboard.html", {
        "pools": pools, "orgs_by_status": by_status,
        "org_total": sum(row["value"] for row in by_status),
        # Both figures count approved orgs; they differ only by orgs approved without a
        # queue pool (no pool serves their region), which the card names.
        "approved_total": approved, "waitlisted": waitlisted, "unqueued": approved - waitlisted,
        "next_wave": next_scheduled_wave(), "billing": billing_problem_counts(),
        "speed_window_minutes": int(SPEED_WINDOW.total_seconds() // 60),
    })


@permission_required(perm.VIEW_ORGS, raise_exception=True)
def org_list(request, *, site):
    status = request.GET.get("status", "")
    status = status if status in OrgStatus.values else ""
    text = request.GET.get("q", "").strip()
    page = Paginator(org_search(status=status, text=text), PAGE_SIZE).get_page(
        request.GET.get("page"))
    return _render(request, site, "console/org_list.html", {
        "page": page, "status": status, "q": text, "statuses": OrgStatus.choices,
        "query": urlencode({"q": text, "status": status}),
    })


# The org page's usage ranges: hourly buckets over the last day or week.
USAGE_RANGES = {"24h": timedelta(hours=24), "7d": timedelta(days=7)}
HOUR = timedelta(hours=1)


def _org_usage(request, org, allocations) -> dict:
    usage_range = request.GET.get("range", "24h")
    usage_range = usage_range if usage_range in USAGE_RANGES else "24h"
    now = timezone.now()
    since = now.replace(minute=0, second=0, microsecond=0) + HOUR - USAGE_RANGES[usage_range]
    rows = org_usage_buckets(org=org, since=since, bucket=HOUR, until=now)
    seconds = SPEED_WINDOW.total_seconds()
    speeds = delivered_speed(org=org, since=now - SPEED_WINDOW, until=now, by=("pool_id",))
    pools = CapacityPool.objects.in_bulk([s.group["pool_id"] for s in speeds])
    by_pool = {a.pool_id: a for a in allocations}
    speed_rows = []
    for speed in speeds:
        allocation, used = by_pool.get(speed.group["pool_id"]), speed.tokens / seconds
        speed_rows.append({"speed": speed, "pool": pools[speed.group["pool_id"]],
                           "allocation": allocation, "used_tps": used,
                           "share": used / allocation.guaranteed_tps if allocation else None})
    return {"usage_range": usage_range, "usage_ranges": list(USAGE_RANGES),
            "charts": org_usage_charts(rows=rows, allocations=allocations, bucket=HOUR),
            "speed_rows": speed_rows, "speed_window_minutes": int(seconds // 60)}


@permission_required(perm.VIEW_ORGS, raise_exception=True)
def org_detail(request, *, site, org_id: int):
    return _org_page(request, site, org=org_get(org_id=org_id))


def _named_bookings(request) -> list[int]:
    """The bookings an operator ticked as broken by the change they confirm."""
    return [int(x) for x in request.POST.getlist("break_bookings") if x.isdigit()]


def _org_page(request, site, *, org, grant_form=None, status=200):
    can_see_invoices = request.user.has_perm(perm.VIEW_INVOICES)
    allocations = list(org_allocations(org=org))
    return _render(request, site, "console/org_detail.html", {
        **_org_usage(request, org, allocations),
        "invoices": invoices_for_org(org=org)[:PAGE_SIZE] if can_see_invoices else None,
        "org": org,
        "actions": [(a, LIFECYCLE_LABELS[a]) for a in org_allowed_actions(org=org)],
        # What a suspension or an offboarding breaks: named by ticking, else refused.
        "live_bookings": list(bookings_relying_on(org_id=org.pk, ending_after=timezone.now())),
        "allocations": allocations, "keys": org_api_keys(org=org),
        "members": org_members(org=org).order_by("user__email"),
        "audit": audit_events(org_id=org.pk)[:PAGE_SIZE],
        "grant_form": grant_form or AllocationGrantForm(),
        "requests": org_quota_requests(org=org)[:PAGE_SIZE],
        "can_decide": request.user.has_perm(perm.DECIDE_QUOTA_REQUESTS),
    }, status=status)


@require_POST
@permission_required(perm.CHANGE_LIFECYCLE, raise_exception=True)
def org_lifecycle(request, *, site, org_id: int):
    org = org_get(org_id=org_id)
    form = LifecycleForm(request.POST)
    if not form.is_valid():
        flash(request, messages.ERROR, "Unknown lifecycle action.", at="lifecycle")
        return redirect_at("admin:console_org", org.pk, at="lifecycle")
    action = form.cleaned_data["action"]
    try:
        org_transition(action=action, org=org, actor=request.user,
                       reason=form.cleaned_data["reason"],
                       break_bookings=_named_bookings(request)
                       if action in ("suspend", "offboard") else ())
    except DomainError as error:
        # Illegal transitions (a stale page, a colleague faster) are explained, nothing changed.
        flash(request, messages.ERROR, error.message, at="lifecycle")
    else:
        flash(request, messages.SUCCESS,
              f"{org.name} is now {org.get_status_display().lower()}.", at="lifecycle")
    return redirect_at("admin:console_org", org.pk, at="lifecycle")


@require_POST
@permission_required(perm.GRANT_ALLOCATION, raise_exception=True)
def allocation_grant(request, *, site, org_id: int):
    org = org_get(org_id=org_id)
    form = AllocationGrantForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            allocation_grant_service(
                org=org, pool=data["pool"], guaranteed_tps=data["guaranteed_tps"],
                burst_tps=data["burst_tps"], daily_tokens=data["daily_tokens"],
                max_concurrency=data["max_concurrency"], actor=request.user,
                reason=data["reason"])
        except DomainError as error:
            form_add_domain_error(form=form, error=error)
        else:
            flash(request, messages.SUCCESS, f"Allocation granted in {data['pool']}.",
                  at="allocations")
            return redirect_at("admin:console_org", org.pk, at="allocations")
    return _org_page(request, site, org=org, grant_form=form, status=422)


@permission_required(perm.VIEW_ORGS, raise_exception=True)
def allocation_edit(request, *, site, allocation_id: int):
    allocation = allocation_get(allocation_id=allocation_id)
    can_change = request.user.has_perm(perm.CHANGE_ALLOCATION)
    initial = {f: getattr(allocation, f) for f in
               ("guaranteed_tps", "burst_tps", "daily_tokens", "max_concurrency")}
    form = AllocationChangeForm(request.POST or None, initial=initial)
    status = 200
    if request.method == "POST":
        if not can_change:
            return _render(request, site, "403.html", {}, status=403)
        if form.is_valid():
            data = form.cleaned_data
            try:
                allocation_change(allocation=allocation, actor=request.user, **data)
            except DomainError as error:
                form_add_domain_error(form=form, error=error)
            else:
                flash(request, messages.SUCCESS, f"Allocation in {allocation.pool} changed.",
                      at="allocations")
                return redirect_at("admin:console_org", allocation.org_id, at="allocations")
        status = 422
    return _render(request, site, "console/allocation_edit.html", {
        "allocation": allocation, "form": form, "can_change": can_change,
        # What ending it breaks: named by ticking, else refused.
        "live_bookings": list(bookings_relying_on(org_id=allocation.org_id,
                                                  pool_id=allocation.pool_id,
                                                  ending_after=timezone.now())),
    }, status=status)


@require_POST
@permission_required(perm.CHANGE_ALLOCATION, raise_exception=True)
def allocation_end_view(request, *, site, allocation_id: int):
    allocation = allocation_get(allocation_id=allocation_id)
    try:
        allocation_end_service(allocation=allocation, actor=request.user,
                               reason=request.POST.get("reason", ""),
                               break_bookings=_named_bookings(request))
    except DomainError as error:
        # Back where the bookings it would break can be ticked.
        flash(request, messages.ERROR, error.message, at="end")
        return redirect_at("admin:console_allocation", allocation.pk, at="end")
    else:
        flash(request, messages.SUCCESS, f"Allocation in {allocation.pool} ended.",
              at="allocations")
    return redirect_at("admin:console_org", allocation.org_id, at="allocations")




@permission_required(perm.VIEW_POOLS, raise_exception=True)
def pool_list(request, *, site):
    return _pools_page(request, site)


def _pool_forms(pool, summary) -> dict:
    admission = getattr(pool, "admission", None)
    return {
        "capacity": PoolCapacityForm(initial={"capacity_tps": summary.capacity_tps,
                                              "prefill_capacity_tps": pool.prefill_capacity_tps},
                                     auto_id=f"pool{pool.pk}_capacity_%s"),
        "settings": PoolSettingsForm(initial={f: getattr(pool, f) for f in POOL_SETTINGS},
                                     auto_id=f"pool{pool.pk}_settings_%s"),
        "admission": PoolAdmissionForm(initial={
            "auto_admit": admission.auto_admit if admission else False,
            **{field: getattr(admission, field) if admission
               else PoolAdmission._meta.get_field(field).default
               for field in AUTO_APPROVAL_FIELDS},
        }, auto_id=f"pool{pool.pk}_admission_%s"),
    }


def _pools_page(request, site, *, failed_form=None, failed_pool_id=None, failed_kind="",
                status=200):
    pools = {pool.pk: pool for pool in CapacityPool.objects.select_related("admission")}
    live = pools_live_use()
    rows = []
    for summary in pool_capacity_summaries():
        forms_ = _pool_forms(pools[summary.pool_id], summary)
        if summary.pool_id == failed_pool_id:
            forms_[failed_kind] = failed_form
        _, day = pool_use_charts(summary=summary, live=live[summary.pool_id])
        rows.append({"summary": summary, "pool": pools[summary.pool_id], "forms": forms_,
                     "place": f"pool-{summary.pool_id}", "chart": day})
    return _render(request, site, "console/pool_list.html", {
        "rows": rows, "can_change": request.user.has_perm(perm.CHANGE_CAPACITY),
        "can_change_admission": request.user.has_perm(perm.CHANGE_POOL_ADMISSION),
    }, status=status)


def _pool_form_post(request, site, *, pool_id: int, form_class, kind: str, save, saved: str):
    """Bind one of the pool page's forms, run its service, and either go back to the pools
    page with `saved` (formatted with the pool and the form's data) or show the page again with
    the service's refusal on that form."""
    pool = pool_get(pool_id=pool_id)
    form = form_class(request.POST, auto_id=f"pool{pool.pk}_{kind}_%s")
    if form.is_valid():
        try:
            save(pool, form.cleaned_data)
        except DomainError as error:
            form_add_domain_error(form=form, error=error)
        else:
            flash(request, messages.SUCCESS, saved.format(pool=pool, **form.cleaned_data),
                  at=f"pool-{pool.pk}")
            return redirect_at("admin:console_pools", at=f"pool-{pool.pk}")
    return _pools_page(request, site, failed_form=form, failed_pool_id=pool.pk,
                       failed_kind=kind, status=422)


@require_POST
@permission_required(perm.CHANGE_CAPACITY, raise_exception=True)
def pool_settings(request, *, site, pool_id: int):
    # Capacity has its own form (with a reason); here it is passed through unchanged.
    return _pool_form_post(
        request, site, pool_id=pool_id, form_class=PoolSettingsForm, kind="settings",
        saved="Settings of {pool} saved.",
        save=lambda pool, data: pool_settings_set(pool=pool, actor=request.user,
                                                  capacity_tps=pool.capacity_tps, **data))


@require_POST
@permission_required(perm.CHANGE_POOL_ADMISSION, raise_exception=True)
def pool_admission(request, *, site, pool_id: int):
    return _pool_form_post(
        request, site, pool_id=pool_id, form_class=PoolAdmissionForm, kind="admission",
        saved="Admission settings of {pool} saved.",
        save=lambda pool, data: pool_admission_set(
            pool=pool, actor=request.user, auto_admit=data["auto_admit"],
            auto_approval={field: data[field] for field in AUTO_APPROVAL_FIELDS}))


@require_POST
@permission_required(perm.CHANGE_CAPACITY, raise_exception=True)
def pool_capacity(request, *, site, pool_id: int):
    return _pool_form_post(
        request, site, pool_id=pool_id, form_class=PoolCapacityForm, kind="capacity",
        saved="{pool} now has {capacity_tps:,} tokens/s.",
        save=lambda pool, data: pool_capacity_set(pool=pool, actor=request.user, **data))


class AuditSearchForm(forms.Form):
    action = forms.CharField(label="Action starts with", required=False,
                             help_text="e.g. org. or allocation.grant")
    actor = forms.CharField(label="Actor", required=False)
    org = forms.IntegerField(label="Organization id", required=False, min_value=1)
    target = forms.CharField(label="Target", required=False,
                             help_text="type[:id], e.g. quotas.allocation:12")
    since = forms.DateTimeField(label="From (UTC)", required=False,
                                widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateTimeField(label="Until (UTC)", required=False,
                                widget=forms.DateInput(attrs={"type": "date"}))


@permission_required(perm.VIEW_AUDIT, raise_exception=True)
def audit_search(request, *, site):
    form = AuditSearchForm(request.GET or None)
    filters = {}
    if form.is_valid():
        data = form.cleaned_data
        filters = {"org_id": data["org"], "action": data["action"].strip(),
                   "actor": data["actor"].strip(), "target": data["target"].strip(),
                   "since": data["since"], "until": data["until"]}
    page = Paginator(audit_events(**filters), PAGE_SIZE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return _render(request, site, "console/audit.html", {
        "form": form, "page": page, "query": query.urlencode(),
    }, status=200 if form.is_valid() or not request.GET else 400)
