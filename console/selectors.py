"""Reads for the console pages."""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, F, Q, QuerySet
from django.http import Http404
from django.utils import timezone

from metering.selectors import SPEED_WINDOW, DeliveredSpeed, delivered_speed, pools_tps_series
from orgs.models import AuditEvent, Organization, OrgStatus
from orgs.selectors import audit_target_labels
from quotas.models import Allocation, GatewayToken
from quotas.selectors import allocations_in_force


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


def gateway_tokens_all() -> QuerySet[GatewayToken]:
    """Active tokens first, newest first."""
    return GatewayToken.objects.select_related("created_by").order_by(
        F("revoked_at").desc(nulls_first=True), "-created_at", "-id")


def gateway_token_get(*, token_id: int) -> GatewayToken:
    token = GatewayToken.objects.filter(pk=token_id).first()
    if token is None:
        raise Http404("No such gateway token.")
    return token


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
        # A model that moved between apps: its older rows carry its old label.
        events = events.filter(target_type__in=audit_target_labels(kind),
                               **({"target_id": pk} if pk else {}))
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


@dataclass(frozen=True)
class OrgInPool:
    """One org's row of a pool's speed board: its guarantee (None: no allocation in force any
    more) against what it used and the speed it got over the window."""

    org_id: int
    name: str
    guaranteed_tps: int | None
    used_tps: float
    speed: DeliveredSpeed | None

    @property
    def guarantee_share(self) -> float | None:
        return self.used_tps / self.guaranteed_tps if self.guaranteed_tps else None


def pools_speed_board(*, now: datetime | None = None, window: timedelta = SPEED_WINDOW
                      ) -> dict[int, dict]:
    """The dashboard's view of each pool over the recent window: the speed it delivered, and
    each org's use against its guarantee with the speed it got, busiest first. Four queries
    however many pools and orgs (the speed reads raw events, see quotas.selectors)."""
    now = now or timezone.now()
    since, seconds = now - window, window.total_seconds()
    pools = {s.group["pool_id"]: s for s in delivered_speed(since=since, until=now,
                                                            by=("pool_id",))}
    by_org = {(s.group["pool_id"], s.group["org_id"]): s
              for s in delivered_speed(since=since, until=now, by=("pool_id", "org_id"))}
    guaranteed = {(pool_id, org_id): tps for pool_id, org_id, tps in allocations_in_force(
        now=now).values_list("pool_id", "org_id", "guaranteed_tps")}
    cells = set(guaranteed) | set(by_org)
    names = dict(Organization.objects.filter(pk__in={org for _, org in cells})
                 .values_list("pk", "name"))
    board: dict[int, dict] = {}
    for pool_id, org_id in cells:
        speed = by_org.get((pool_id, org_id))
        board.setdefault(pool_id, {"speed": pools.get(pool_id), "orgs": []})["orgs"].append(
            OrgInPool(org_id=org_id, name=names.get(org_id, f"#{org_id}"),
                      guaranteed_tps=guaranteed.get((pool_id, org_id)),
                      used_tps=speed.tokens / seconds if speed else 0.0, speed=speed))
    for entry in board.values():
        entry["orgs"].sort(key=lambda o: (-o.used_tps, -(o.guaranteed_tps or 0), o.name))
    return board


def orgs_without_application_count() -> int:
    """Organizations on their way in (applied, in review, approved) without any application:
    signed up but never applied, or moved through the lifecycle by hand. The vetting queue,
    which lists applications, says how many."""
    return (Organization.objects.filter(
        status__in=[OrgStatus.APPLIED, OrgStatus.IN_REVIEW, OrgStatus.APPROVED],
        applications__isnull=True).count())
