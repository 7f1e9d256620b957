"""Quotas and usage: live charts (htmx polls the fragment every 10 s), the speed delivered, and
the streamed CSV export of any date range. Every member may read them."""

from datetime import UTC, datetime, time, timedelta

from django.shortcuts import render
from django.utils import timezone

from billing.api.views_org import usage_csv_stream
from metering.selectors import (
    SPEED_WINDOW,
    delivered_speed,
    usage_by_key,
    usage_hourly_series,
    usage_tokens_by_pool,
    usage_tps_series,
)
from portal.access import org_page
from portal.forms import UsageExportForm
from portal.progress import org_admitted, org_progress
from quotas.selectors import org_allocations
from sluice.charts import Limit, Series, TimeChart

MINUTE = 60
HOUR = 3600


@org_page(page="usage")
def usage(request, membership):
    org = membership.org
    if not org_admitted(org=org):
        return render(request, "portal/usage.html", {"org": org,
                                                     "progress": org_progress(org=org)})
    return render(request, "portal/usage.html", {
        "admitted": True, "export_form": _export_form(), **_live_context(org)})


def _export_form(data=None) -> UsageExportForm:
    today = timezone.now().date()
    return UsageExportForm(data, initial={"start": today - timedelta(days=30), "end": today})


@org_page(page="usage")
def usage_live(request, membership):
    return render(request, "portal/_usage_live.html", _live_context(membership.org))


def _live_context(org) -> dict:
    now = timezone.now()
    midnight = datetime.combine(now.date(), time.min, tzinfo=UTC)
    allocations = list(org_allocations(org=org))
    hour = usage_tps_series(org=org, since=now - timedelta(hours=1), bucket_seconds=MINUTE,
                            until=now)
    day = usage_hourly_series(org=org, since=now - timedelta(days=1), until=now)
    today = usage_hourly_series(org=org, since=midnight, until=now)
    limits = _tps_limits(allocations)
    hour_tokens = sum(p.tokens for p in hour)
    return {
        "org": org, "now": now, "allocations": allocations,
        "hour_tps": TimeChart(
            key="hour-tps", title="Tokens per second, last hour (per minute)", unit="tokens/s",
            times=[p.at for p in hour], step_seconds=MINUTE, decimals=1, limits=limits,
            # The minutes at both ends are partial: the hour's average is tokens / 3,600 s.
            series=[Series("Tokens/s", [round(p.tps(MINUTE), 1) for p in hour],
                           mean=hour_tokens / HOUR)]),
        "hour_requests": TimeChart(
            key="hour-requests", title="Requests and errors, last hour (per minute)",
            unit="requests", times=[p.at for p in hour], step_seconds=MINUTE,
            series=[Series("Requests", [p.requests for p in hour], bars=True, summary="total"),
                    Series("Errors", [p.errors for p in hour], color="bad", bars=True,
                           summary="total")]),
        "day_tps": TimeChart(
            key="day-tps", title="Tokens per second, last 24 hours (hourly averages)",
            unit="tokens/s", times=[p.at for p in day], step_seconds=HOUR, decimals=1,
            limits=limits, series=[Series("Tokens/s", [round(p.tps(HOUR), 1) for p in day])]),
        "hour_totals": {"requests": sum(p.requests for p in hour),
                        "errors": sum(p.errors for p in hour), "tokens": hour_tokens},
        "burn": _burn_up(allocations, usage_tokens_by_pool(org=org, since=midnight),
                         today=today),
        **_speed(org, now, allocations),
        "keys": usage_by_key(org=org, since=now - timedelta(days=1)),
    }


def _tps_limits(allocations) -> list[Limit]:
    return [Limit("Guaranteed", sum(a.guaranteed_tps for a in allocations)),
            Limit("Burst ceiling", sum(a.burst_tps for a in allocations))] \
        if allocations else []


def _burn_up(allocations, used_today: dict[int, int], *, today) -> dict:
    """Tokens used so far today (UTC day), per pool and hour by hour, against the quota."""
    quota = sum(a.daily_tokens for a in allocations)
    total, cumulative = 0, []
    for point in today:
        total += point.tokens
        cumulative.append(total)
    pools = [{"pool": a.pool, "quota": a.daily_tokens, "used": used_today.get(a.pool_id, 0),
              "left": max(a.daily_tokens - used_today.get(a.pool_id, 0), 0)}
             for a in allocations]
    chart = TimeChart(key="burn", title="Tokens used today (UTC), cumulative", unit="tokens",
                      times=[p.at for p in today], step_seconds=HOUR,
                      series=[Series("Used today", cumulative, color="violet",
                                     summary="latest")],
                      limits=[Limit("Daily quota", quota)] if quota else [])
    return {"quota": quota, "chart": chart, "pools": pools}


def _speed(org, now, allocations) -> dict:
    """The org's delivered speed over the recent window, in total and per API key (one
    selector for both, so the figures add up)."""
    since = now - SPEED_WINDOW
    [total] = delivered_speed(org=org, since=since, until=now)
    per_key = delivered_speed(org=org, since=since, until=now,
                              by=("api_key_id", "api_key__name"))
    return {"speed": total, "speed_minutes": int(SPEED_WINDOW.total_seconds() // 60),
            "speed_keys": [{"name": s.group["api_key__name"] or "(no key)", "speed": s}
                           for s in per_key],
            "speed_pools": [a.pool for a in allocations]}


@org_page(page="usage")
def usage_export(request, membership):
    form = _export_form(request.GET)
    if not form.is_valid():
        return render(request, "portal/usage.html", {
            "org": membership.org, "export_form": form, "export_invalid": True,
            "admitted": True,
            **_live_context(membership.org)}, status=400)
    start, end = form.cleaned_data["start"], form.cleaned_data["end"]
    org = membership.org
    return usage_csv_stream(
        org=org, start=datetime.combine(start, time.min, tzinfo=UTC),
        end=datetime.combine(end + timedelta(days=1), time.min, tzinfo=UTC),
        filename=f"{org.slug}-usage-{start:%Y%m%d}-{end:%Y%m%d}.csv")
