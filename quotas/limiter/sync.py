"""PostgreSQL -> Redis: what the admission engine knows about orgs, keys and limits.

The services call `limits_publish_org_later` inside their transaction (via sluice.events); the
publish runs after the commit, so Redis never learns a state that was rolled back. If Redis is
down at that moment, a Celery task retries it, and `limiter_sync` (beat, and after a flush,
authorize itself) rebuilds whole pools.

Per pool the org holds (or held) an allocation in, Redis keeps: the org's status and limits, the
SHA-256 digests of its usable API keys, the pool's headroom for bursts, and a `synced` marker set
once the pool has been rebuilt in full.
"""

import logging
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime

from django.db import transaction
from django.db.models import F, Q, Sum

from orgs.models import ApiKey, Organization
from quotas.limiter.clock import clock, day_stamp, epoch_ms, month_stamp
from quotas.limiter.connection import LimiterUnavailable, limiter_client, pool_tag, script_run
from quotas.models import Allocation, CapacityPool, UsageHourly
from quotas.selectors import allocations_in_force

logger = logging.getLogger(__name__)

# A TPS bucket holds this many seconds of its rate: an idle org may send that much at once,
# and one request can reserve at most (guaranteed + burst) x BUCKET_SECONDS tokens.
BUCKET_SECONDS = 10


def _spend_by_org(orgs: dict[int, Organization], now: datetime) -> dict[int, tuple[int, int]]:
    """org id -> (monthly spend cap, month-to-date spend), in micro-dollars, from billing.
    Only capped orgs are rated: without a cap, authorize never reads the counter."""
    from billing.selectors import billing_spend_caps_micros  # billing depends on quotas
    from billing.services.caps import month_to_date_micros

    caps = billing_spend_caps_micros(org_ids=set(orgs))
    return {org_id: (caps[org_id], month_to_date_micros(org=org, now=now)) if org_id in caps
            else (0, 0) for org_id, org in orgs.items()}


@dataclass(frozen=True)
class _OrgInPool:
    org: Organization
    pool: CapacityPool
    allocation: Allocation | None  # the one in force, if any


def _headroom_by_pool(pool_ids: set[int], now: datetime) -> dict[int, int]:
    sums = dict(allocations_in_force(now=now).filter(pool_id__in=pool_ids)
                .values_list("pool_id").annotate(total=Sum("guaranteed_tps")))
    pools = CapacityPool.objects.filter(pk__in=pool_ids).values_list("pk", "capacity_tps")
    return {pk: max(0, capacity - sums.get(pk, 0)) for pk, capacity in pools}


def _keys_by_org(org_ids: set[int], now: datetime) -> dict[int, list[tuple[str, str]]]:
    usable = ApiKey.objects.filter(org_id__in=org_ids, revoked_at__isnull=True).filter(
        Q(expires_at__isnull=True) | Q(expires_at__gt=now))
    result: dict[int, list[tuple[str, str]]] = defaultdict(list)
    for key in usable.only("pk", "org_id", "digest", "expires_at"):
        expires = epoch_ms(key.expires_at) if key.expires_at else 0
        result[key.org_id].append((key.digest, f"{key.org_id}:{key.pk}:{expires}"))
    return result


def _day_used(org_ids: set[int], pool_ids: set[int], now: datetime) -> dict:
    start = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    rows = (UsageHourly.objects.filter(org_id__in=org_ids, pool_id__in=pool_ids, hour__gte=start)
            .values_list("org_id", "pool_id")
            .annotate(total=Sum(F("input_tokens") + F("output_tokens"))))
    return {(org_id, pool_id): total for org_id, pool_id, total in rows}


def _memberships(*, org_ids=None, pool_ids=None, now: datetime) -> list[_OrgInPool]:
    """Every (org, pool) pair with an allocation, past or present: an org whose allocation ended
    keeps its keys known in the pool, so its callers get 403 rather than "unknown key"."""
    allocations = Allocation.objects.select_related("org", "pool")
    if org_ids is not None:
        allocations = allocations.filter(org_id__in=org_ids)
    if pool_ids is not None:
        allocations = allocations.filter(pool_id__in=pool_ids)
    in_force = set(allocations_in_force(now=now).values_list("pk", flat=True))
    pairs: dict[tuple[int, int], _OrgInPool] = {}
    for a in allocations.order_by("pk"):
        current = pairs.get((a.org_id, a.pool_id))
        if current is None or current.allocation is None:
            pairs[(a.org_id, a.pool_id)] = _OrgInPool(a.org, a.pool,
                                                      a if a.pk in in_force else None)
    return list(pairs.values())


def _publish_args(m: _OrgInPool, *, headroom: int, keys: list, day_used: int,
                  spend: tuple[int, int], now: datetime) -> list:
    a = m.allocation
    g, b = (a.guaranteed_tps, a.burst_tps - a.guaranteed_tps) if a else (0, 0)
    args = [
        m.org.pk, m.org.status, m.org.suspension_reason, "1" if a else "0",
        g, g * BUCKET_SECONDS, b, b * BUCKET_SECONDS,
        a.daily_tokens if a else 0, a.max_concurrency if a else 0,
        spend[0], headroom, headroom * BUCKET_SECONDS,
        day_stamp(now), day_used, month_stamp(now), spend[1],
    ]
    for digest, entry in keys:
        args += [digest, entry]
    return args


def _publish(*, org_ids=None, pool_ids=None) -> int:
    now = clock.now()
    members = _memberships(org_ids=org_ids, pool_ids=pool_ids, now=now)
    orgs = {m.org.pk for m in members}
    pools = {m.pool.pk for m in members}
    headroom = _headroom_by_pool(pools, now)
    keys = _keys_by_org(orgs, now)
    used = _day_used(orgs, pools, now)
    spend = _spend_by_org({m.org.pk: m.org for m in members}, now)
    for m in members:
        args = _publish_args(m, headroom=headroom[m.pool.pk], keys=keys.get(m.org.pk, []),
                             day_used=used.get((m.org.pk, m.pool.pk), 0),
                             spend=spend[m.org.pk], now=now)
        script_run("org_publish", keys=[f"{pool_tag(m.pool.pk)}:keys"], args=args,
                   bulk=True)
    return len(members)


def limiter_publish_org(*, org_id: int) -> int:
    """Push one org's state to every pool it has (had) an allocation in. Returns the pools."""
    return _publish(org_ids=[org_id])


def limiter_sync_pool(*, pool_id: int) -> int:
    """Rebuild one pool from PostgreSQL, then mark it synced. Returns the orgs written."""
    written = _publish(pool_ids=[pool_id])
    try:
        limiter_client(bulk=True).set(f"{pool_tag(pool_id)}:synced", "1")
    except Exception as exc:
        raise LimiterUnavailable(str(exc)) from exc
    return written


def limiter_sync_all() -> dict[int, int]:
    return {pool_id: limiter_sync_pool(pool_id=pool_id)
            for pool_id in CapacityPool.objects.order_by("pk").values_list("pk", flat=True)}


def limits_publish_org_now_or_queue(*, org_id: int) -> None:
    """Publish directly (a suspension must stop traffic within a second); if Redis is down, hand
    the publish to a Celery task that retries with backoff."""
    from quotas.tasks import limits_publish_org

    try:
        limiter_publish_org(org_id=org_id)
    except LimiterUnavailable:
        logger.warning("limiter publish of org %s failed; queued a retry", org_id)
        try:
            limits_publish_org.apply_async(kwargs={"org_id": org_id}, retry=False)
        except Exception:
            # The broker shares Redis: when both are down, the periodic limiter_sync (beat)
            # is what brings this org's state back.
            logger.exception("could not queue the limiter publish of org %s", org_id)


def limits_publish_org_later(*, org_id: int) -> None:
    transaction.on_commit(lambda: limits_publish_org_now_or_queue(org_id=org_id))
