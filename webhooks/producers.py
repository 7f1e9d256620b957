"""Events that no single transaction announces, derived from state: daily-quota thresholds (after
each usage batch), waitlist positions (beat) and the admission queue's refusals (each drained
minute of refusal counts). All record through webhook_event_record, whose unique (org, key)
makes each occurrence fire once however many workers race."""

from collections import Counter, defaultdict
from datetime import UTC, date, datetime, timedelta

from django.db import connection, transaction
from django.db.models import F, Sum
from django.utils import timezone

from metering.events import UsageCell
from metering.models import RefusalMinute, UsageHourly
from metering.usage_report import SERVICE_TIERS
from orgs.models import Organization, OrgStatus
from quotas.models import CapacityPool
from quotas.selectors import allocations_in_force
from rollout.models import OrgPoolPreference
from rollout.waitlist import waitlist_estimates
from sluice.sql import bigint_array
from webhooks.models import EventType, WaitlistPositionNotice, WebhookEndpoint, WebhookEvent
from webhooks.services import webhook_event_record

THRESHOLDS = (50, 80, 100)
# What the admission queue refuses a request that asked to wait with (docs/hook.md).
QUEUE_REFUSALS = ("queue_timeout", "queue_full")


def _subscribed(org_ids: set[int], event_type: str) -> set[int]:
    """The orgs among `org_ids` with an enabled endpoint subscribed to `event_type`. Asked after
    every usage batch, of one event too, and almost always empty: plain SQL, because building
    the ORM query (an array containment) cost several times what running it did
    (bench/usage_http.py, one event per call)."""
    with connection.cursor() as cursor:
        table = WebhookEndpoint._meta.db_table  # a model constant, not input
        cursor.execute(f"SELECT DISTINCT org_id FROM {table} "  # noqa: S608
                       "WHERE org_id = ANY(%s::bigint[]) AND disabled_at IS NULL "
                       "AND event_types @> ARRAY[%s]::varchar[]",
                       [bigint_array(org_ids), event_type])
        return {org_id for (org_id,) in cursor.fetchall()}


def _day_usage(org_ids: set[int], days: set[date]) -> dict[tuple[int, int, date], int]:
    used: dict[tuple[int, int, date], int] = defaultdict(int)
    for day in days:
        start = datetime(day.year, day.month, day.day, tzinfo=UTC)
        rows = (UsageHourly.objects.filter(org_id__in=org_ids, hour__gte=start,
                                           hour__lt=start + timedelta(days=1))
                .values("org_id", "pool_id")
                .annotate(tokens=Sum(F("input_tokens") + F("output_tokens"))).order_by())
        for r in rows:
            used[(r["org_id"], r["pool_id"], day)] += r["tokens"]
    return used


def _candidates(cells: list[UsageCell], org_ids: set[int]) -> list[tuple]:
    """(org, pool, day, threshold, used, quota) for every threshold reached."""
    days = {c.hour.astimezone(UTC).date() for c in cells if c.org_id in org_ids}
    used = _day_usage(org_ids, days)
    quotas = dict(((a.org_id, a.pool_id), a.daily_tokens) for a in
                  allocations_in_force().filter(org_id__in=org_ids).only(
                      "org_id", "pool_id", "daily_tokens"))
    found = []
    for (org_id, pool_id, day), tokens in used.items():
        quota = quotas.get((org_id, pool_id), 0)
        for threshold in THRESHOLDS:
            if quota and tokens * 100 >= quota * threshold:
                found.append((org_id, pool_id, day, threshold, tokens, quota))
    return found


def daily_quota_thresholds_announce(*, cells: list[UsageCell]) -> int:
    """After a usage batch: announce each threshold of an allocation's daily tokens that its
    UTC day's usage reached. Only orgs with a subscribed endpoint are looked at (one query, and
    no transaction, for every other org); events already recorded are skipped before trying to
    insert them."""
    org_ids = _subscribed({c.org_id for c in cells}, EventType.DAILY_QUOTA_THRESHOLD)
    return _daily_quota_thresholds_record(cells, org_ids) if org_ids else 0


@transaction.atomic(durable=True)
def _daily_quota_thresholds_record(cells: list[UsageCell], org_ids: set[int]) -> int:
    found = _candidates(cells, org_ids)
    keys = {c: f"quota.daily:{c[2]:%Y-%m-%d}:{c[1]}:{c[3]}" for c in found}
    recorded = set(WebhookEvent.objects.filter(org_id__in=org_ids, key__in=keys.values())
                   .values_list("org_id", "key"))
    pools = {p.pk: p for p in CapacityPool.objects.filter(pk__in={c[1] for c in found})}
    announced = 0
    for candidate, key in keys.items():
        org_id, pool_id, day, threshold, tokens, quota = candidate
        if (org_id, key) in recorded:
            continue
        pool = pools[pool_id]
        announced += webhook_event_record(
            org_id=org_id, type=EventType.DAILY_QUOTA_THRESHOLD, key=key,
            data={"threshold_percent": threshold, "day": day.isoformat(),
                  "used_tokens": tokens, "daily_tokens": quota,
                  "pool": {"id": pool.pk, "model": pool.model, "region": pool.region,
                           "service_tier": SERVICE_TIERS.get(pool.tier)}}) is not None
    return announced


@transaction.atomic(durable=True)
def _position_announce(*, org_id: int, position: int, data: dict) -> bool:
    notice, created = WaitlistPositionNotice.objects.select_for_update().get_or_create(
        org_id=org_id, defaults={"position": position})
    if not created and notice.position == position:
        return False
    notice.position, notice.changes = position, notice.changes + 1
    notice.save(update_fields=["position", "changes", "updated_at"])
    return webhook_event_record(
        org_id=org_id, type=EventType.WAITLIST_POSITION,
        key=f"waitlist.position:{notice.changes}", data=data) is not None


def waitlist_positions_announce(*, now: datetime | None = None) -> int:
    """Beat: each queued org with a subscribed endpoint whose position moved since it was last
    told (or that was never told) gets `waitlist.position_changed`."""
    now = now or timezone.now()
    queued = Organization.objects.filter(status=OrgStatus.APPROVED).values_list("pk", flat=True)
    org_ids = _subscribed(set(queued), EventType.WAITLIST_POSITION)
    pools = {pref.pool for pref in OrgPoolPreference.objects.filter(org_id__in=org_ids)
             .select_related("pool")}
    announced = 0
    for pool in sorted(pools, key=lambda p: p.pk):
        for org_id, estimate in waitlist_estimates(pool=pool).items():
            if org_id not in org_ids:
                continue
            wave = estimate.wave
            announced += _position_announce(org_id=org_id, position=estimate.position, data={
                "position": estimate.position, "queue_length": estimate.queue_length,
                "pool": {"id": pool.pk, "model": pool.model, "region": pool.region},
                "estimated_wave": None if wave is None else {
                    "id": wave.pk, "name": wave.name, "opens_at": wave.opens_at.isoformat()},
                "as_of": now.isoformat()})
    return announced


def queue_refusals_announce(*, minute: datetime, rows: list[RefusalMinute]) -> int:
    """In the refusal drain's transaction (metering/refusals.py, beat, every minute): one
    `queue.requests_refused` per org and pool whose requests the admission queue refused in
    that minute, with the counts by code, to orgs with a subscribed endpoint. Its key names the
    minute: at most one a minute per org and pool, however many requests, and a minute drained
    twice announces nothing new."""
    counts: dict[tuple[int, int], Counter] = defaultdict(Counter)
    for row in rows:
        if row.code in QUEUE_REFUSALS:
            counts[(row.org_id, row.pool_id)][row.code] += row.count
    org_ids = _subscribed({org_id for org_id, _ in counts}, EventType.QUEUE_REFUSED) \
        if counts else set()
    pools = CapacityPool.objects.in_bulk({p for o, p in counts if o in org_ids})
    announced = 0
    for (org_id, pool_id), by_code in sorted(counts.items()):
        if org_id not in org_ids:
            continue
        pool = pools[pool_id]
        announced += webhook_event_record(
            org_id=org_id, type=EventType.QUEUE_REFUSED,
            key=f"{EventType.QUEUE_REFUSED}:{pool_id}:{minute:%Y-%m-%dT%H:%M}",
            data={"minute": minute.isoformat(), "refused": sum(by_code.values()),
                  **{code: by_code[code] for code in QUEUE_REFUSALS},
                  "pool": {"id": pool.pk, "model": pool.model, "region": pool.region,
                           "service_tier": SERVICE_TIERS.get(pool.tier)}}) is not None
    return announced
