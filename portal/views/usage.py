"""Quotas and usage: the org's allocations, live charts (htmx polls the fragment every 10 s)
and the streamed CSV export of any date range. Every member may read them."""

from datetime import UTC, datetime, time, timedelta

from django.shortcuts import render
from django.utils import timezone

from billing.api.views_org import usage_csv_stream
from portal.access import org_page
from portal.forms import UsageExportForm
from quotas.selectors import (
    org_allocations,
    usage_by_key,
    usage_hourly_series,
    usage_speed,
    usage_tokens_by_pool,
    usage_tps_series,
)

MINUTE = 60


@org_page(page="usage")
def usage(request, membership):
    export_form = UsageExportForm(initial={"start": timezone.now().date() - timedelta(days=30),
                                           "end": timezone.now().date()})
    return render(request, "portal/usage.html", {
        "export_form": export_form,
        **_live_context(membership.org),
    })


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
    used_today = usage_tokens_by_pool(org=org, since=midnight)
    limits = _tps_limits(allocations)
    return {
        "org": org, "now": now, "allocations": allocations,
        "hour_tps": _chart("Tokens per second, per minute over the last hour", hour,
                           {"Tokens/s": [round(p.tps(MINUTE), 1) for p in hour]},
                           limits=limits, unit="tok/s"),
        "day_tps": _chart("Tokens per second, per hour over the last day", day,
                          {"Tokens/s": [round(p.tps(3600), 1) for p in day]},
                          limits=limits, unit="tok/s"),
        "hour_requests": _chart("Requests and errors per minute over the last hour", hour,
                                {"Requests": [p.requests for p in hour],
                                 "Errors": [p.errors for p in hour]}),
        "hour_totals": {"requests": sum(p.requests for p in hour),
                        "errors": sum(p.errors for p in hour),
                        "tokens": sum(p.tokens for p in hour)},
        "burn": _burn_down(allocations, used_today, today=usage_hourly_series(
            org=org, since=midnight, until=now)),
        "speed": usage_speed(org=org, since=now - timedelta(hours=1)),
        "keys": usage_by_key(org=org, since=now - timedelta(days=1)),
    }


SERIES_CSS = {"Tokens/s": "series-tokens", "Requests": "series-requests",
              "Errors": "series-errors", "Tokens left": "series-remaining"}


def _chart(label: str, points, series: dict[str, list], *, limits=(), unit="") -> dict:
    return {"label": label, "times": [p.at for p in points], "limits": limits, "unit": unit,
            "series": [{"name": name, "css": SERIES_CSS[name], "values": values}
                       for name, values in series.items()]}


def _tps_limits(allocations) -> list[dict]:
    return [{"name": "Guaranteed", "value": sum(a.guaranteed_tps for a in allocations)},
            {"name": "Burst", "value": sum(a.burst_tps for a in allocations)}] \
        if allocations else []


def _burn_down(allocations, used_today: dict[int, int], *, today) -> dict:
    """What is left of today's quota (UTC day), per pool and over the day hour by hour."""
    quota = sum(a.daily_tokens for a in allocations)
    left, remaining = quota, []
    for point in today:
        left -= point.tokens
        remaining.append(max(left, 0))
    pools = [{"pool": a.pool, "quota": a.daily_tokens, "used": used_today.get(a.pool_id, 0),
              "left": max(a.daily_tokens - used_today.get(a.pool_id, 0), 0)}
             for a in allocations]
    chart = _chart("Daily tokens left today (UTC)", today, {"Tokens left": remaining},
                   limits=[{"name": "Daily quota", "value": quota}] if quota else [])
    return {"quota": quota, "chart": chart, "pools": pools}


@org_page(page="usage")
def usage_export(request, membership):
    form = UsageExportForm(request.GET)
    if not form.is_valid():
        return render(request, "portal/usage.html", {
            "org": membership.org, "export_form": form, "export_invalid": True,
            **_live_context(membership.org)}, status=400)
    start, end = form.cleaned_data["start"], form.cleaned_data["end"]
    org = membership.org
    return usage_csv_stream(
        org=org, start=datetime.combine(start, time.min, tzinfo=UTC),
        end=datetime.combine(end + timedelta(days=1), time.min, tzinfo=UTC),
        filename=f"{org.slug}-usage-{start:%Y%m%d}-{end:%Y%m%d}.csv")
