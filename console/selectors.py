"""Reads for the console pages."""

from datetime import datetime, timedelta

from django.db.models import Count, Q, QuerySet
from django.http import Http404
from django.utils import timezone

from orgs.models import AuditEvent, Organization, OrgStatus
from quotas.models import Allocation
from quotas.selectors import pools_tps_series


def orgs_by_status() -> list[dict]:
    """Every state with its count (zeros included), in lifecycle order, in one query."""
    counts = dict(Organization.objects.values_list("status").annotate(n=Count("id")))
    return [{"status": s.value, "label": s.label, "value": counts.get(s.value, 0)}
            for s in OrgStatus]


def org_search(*, status: str = "", text: str = "") -> QuerySet[Organization]:
    orgs = Organization.objects.order_by("-status_changed_at")
    if status:
        orgs = orgs.filter(status=status)
    if text:
        orgs = orgs.filter(Q(name__icontains=text) | Q(slug__icontains=text))
    return orgs


def org_get(*, org_id: int) -> Organization:
    org = Organization.objects.filter(pk=org_id).first()
    if org is None:
        raise Http404("No such organization.")
    return org




def allocation_get(*, allocation_id: int) -> Allocation:
    allocation = Allocation.objects.select_related("org", "pool").filter(pk=allocation_id).first()
    if allocation is None:
        raise Http404("No such allocation.")
    return allocation






def audit_search(*, org_id: int | None = None, action: str = "", actor: str = "",
                 target: str = "", since: datetime | None = None,
                 until: datetime | None = None) -> QuerySet[AuditEvent]:
    """Newest first; each filter narrows (action by prefix, so "org." finds every transition)."""
    events = AuditEvent.objects.select_related("org")
    if org_id:
        events = events.filter(org_id=org_id)
    if action:
        events = events.filter(action__startswith=action)
    if actor:
        events = events.filter(actor_label__icontains=actor)
    if target:
        kind, _, pk = target.partition(":")
        events = events.filter(target_type=kind, **({"target_id": pk} if pk else {}))
    if since:
        events = events.filter(created_at__gte=since)
    if until:
        events = events.filter(created_at__lt=until)
    return events


def pools_live_use(*, now: datetime | None = None) -> dict[int, dict]:
    """Per pool: tokens/s in 5-minute buckets over the last hour (raw events) and hourly over
    the last 24 hours (rollups), with the averages the dashboard prints beside the charts."""
    now = now or timezone.now()
    hour = pools_tps_series(since=now - timedelta(hours=1), bucket=timedelta(minutes=5),
                            until=now)
    day_start = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=23)
    day = pools_tps_series(since=day_start, bucket=timedelta(hours=1), until=now)
    return {pool_id: {
        "hour": hour[pool_id], "day": day[pool_id],
        "hour_avg": sum(v for _, v in hour[pool_id]) / len(hour[pool_id]),
        "day_avg": sum(v for _, v in day[pool_id]) / len(day[pool_id]),
    } for pool_id in hour}
