"""PostgreSQL -> Redis: the only bridge between the ORM and the admission engine.

The engine (quotas/limiter) knows nothing of Django. This module configures it from settings,
reads what it must know from PostgreSQL (orgs, allocations, API keys; the day's usage comes
from metering through the `day_usage_reading` event, spend caps and month-to-date spend from
billing through `limits_publishing`) and hands that to the engine's writes
(quotas/limiter/state.py). It is also the engine's `pool_rebuild`: authorize calls it when it
finds a pool unsynced (Redis flushed or restarted), and one rebuild per pool runs at a time
(quotas/limiter/rebuild.py). And it publishes the usable gateway
tokens, which the hook reads from Redis rather than PostgreSQL (quotas/hook/gateway_tokens.py).

When: services call `limits_publish_org_later` and
`limits_publish_pool_later` inside their transaction. Each collects into one set per
transaction (sluice.oncommit), published right after the commit: one publish per org and one
headroom write per pool, however many changes the transaction made, and never a state that was
rolled back. If Redis is down then, a Celery task retries, and `limiter_sync` (beat) rebuilds
whole pools.

Per pool an org holds (or held) an allocation in, Redis keeps: the org's status and limits (with
the prices a reservation holds against its spend cap), the SHA-256 digests of its usable API
keys with their default tiers and slices, the pool's headroom for bursts and its output
estimate default, and a `synced` marker set once the pool has been rebuilt in full.

Bookings change an org's limits and its pool's headroom at their edges. A publish writes the
limits of the moment before the latest edge of the last hour (or of now, without one) and the
edges from then on with the limits each brings, so authorize switches at the exact instant
(_buckets.lua: limits_switch) and a publish made just after an edge still has the buckets meet
it. The beat that records bookings' starts and ends republishes their orgs, so the schedule
moves on as edges pass; `limiter_sync` rebuilds every pool within five minutes in any case.
"""

import logging
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import DatabaseError, transaction
from django.db.models import Q, Sum

from orgs.models import ApiKey, Organization, OrgStatus
from quotas.events import day_usage_reading, limits_publishing
from quotas.limiter.clock import clock, epoch_ms
from quotas.limiter.connection import EngineConfig, LimiterUnavailable, engine_configure
from quotas.limiter.gateway_tokens import gateway_tokens_used_read, gateway_tokens_write
from quotas.limiter.rebuild import limiter_pool_rebuild_once
from quotas.limiter.state import (
    ApiKeyState,
    KeySliceState,
    LimitsChange,
    OrgState,
    PoolState,
    limiter_org_publish,
    limiter_pool_publish,
    limiter_pool_synced_mark,
    limiter_spend_add,
    limiter_spend_cap_set,
)
from quotas.models import BOOKING_LIVE_STATES, Allocation, Booking, CapacityPool, GatewayToken
from quotas.selectors import allocations_in_force
from sluice.oncommit import on_commit_collect

logger = logging.getLogger(__name__)

# A rebuild reads a whole pool: its lock outlives any sane one, and ends by itself if its holder
# dies. The callers it makes wait give up within an authorize's budget, and the pool's failure
# policy answers them.
REBUILD_LOCK_SECONDS = 60
REBUILD_WAIT_SECONDS = 1.0

# The settings the engine is configured from: a test that overrides one reconfigures it.
ENGINE_SETTINGS = frozenset({"REDIS_URL", "LIMITER_REDIS_URL", "REDIS_TIMEOUT_SECONDS",
                             "REDIS_REPLY_TIMEOUT_SECONDS", "RESERVATION_TTL_SECONDS"})


def engine_configure_from_settings() -> None:
    engine_configure(EngineConfig(
        redis_url=settings.LIMITER_REDIS_URL or settings.REDIS_URL,
        timeout_s=settings.REDIS_TIMEOUT_SECONDS,
        reply_timeout_s=settings.REDIS_REPLY_TIMEOUT_SECONDS,
        reservation_ttl_s=settings.RESERVATION_TTL_SECONDS, pool_rebuild=limiter_pool_rebuild))


def engine_settings_changed(*, setting: str, **kwargs) -> None:
    """Receiver of django.test.signals.setting_changed (override_settings in tests)."""
    if setting in ENGINE_SETTINGS:
        engine_configure_from_settings()


@dataclass(frozen=True)
class _Money:
    """What billing says of the capped orgs (its receiver of `limits_publishing` fills it)."""
    spend: dict[int, tuple[int, int]]  # org id -> (monthly cap, month-to-date), micro-dollars
    prices: dict[tuple[int, int], tuple[int, int]]  # (org id, pool id) -> (input, output)


def _money(org_ids: set[int], pool_ids: set[int], now: datetime) -> _Money:
    money = _Money(spend={}, prices={})
    limits_publishing.emit(org_ids=frozenset(org_ids), pool_ids=frozenset(pool_ids), now=now,
                           spend=money.spend, prices=money.prices)
    return money


@dataclass(frozen=True)
class _OrgInPool:
    org: Organization
    pool: CapacityPool
    allocation: Allocation | None  # the one in force, if any


# The latest edge of a booking published even though it has passed (the buckets meet it on the
# next call), and how many edges ahead: the beat republishes as they pass.
SCHEDULE_PAST = timedelta(hours=1)
SCHEDULE_AHEAD = 8


@dataclass(frozen=True)
class _Booked:
    org_id: int
    starts_at: datetime
    ends_at: datetime
    output_tps: int
    input_tps: int
    extra_daily_tokens: int


def _bookings_by_pool(pool_ids: set[int], now: datetime) -> dict[int, list[_Booked]]:
    """The pools' live bookings that end after the published past begins."""
    found: dict[int, list[_Booked]] = defaultdict(list)
    for pool_id, *row in (Booking.objects.filter(pool_id__in=pool_ids,
                                                 state__in=BOOKING_LIVE_STATES,
                                                 ends_at__gt=now - SCHEDULE_PAST)
                          .values_list("pool_id", "org_id", "starts_at", "ends_at",
                                       "output_tps", "input_tps", "extra_daily_tokens")):
        found[pool_id].append(_Booked(*row))
    return found


def _edges(bookings: list[_Booked], now: datetime) -> list[datetime]:
    """The instants the bookings change the guarantees: the latest past one, then those to
    come."""
    instants = sorted({t for b in bookings for t in (b.starts_at, b.ends_at)
                       if t > now - SCHEDULE_PAST})
    return [t for t in instants if t <= now][-1:] + [t for t in instants if t > now][
        :SCHEDULE_AHEAD]


def _booked(bookings: list[_Booked], at: datetime) -> tuple[int, int, int]:
    """Output and input tokens/s and daily tokens the bookings add at `at`."""
    held = [b for b in bookings if b.starts_at <= at < b.ends_at]
    return (sum(b.output_tps for b in held), sum(b.input_tps for b in held),
            sum(b.extra_daily_tokens for b in held))


def _before(edges: list[datetime], now: datetime) -> datetime:
    """The instant whose limits are published as in force: just before the first edge."""
    return edges[0] - timedelta(microseconds=1) if edges else now


def _headroom(pool: CapacityPool, g: int, gi: int, booked: list[_Booked], at: datetime
              ) -> tuple[int, int]:
    """The pool's output and input headroom at `at`: capacity minus allocations (`g`, `gi`)
    and the bookings holding that instant."""
    out, in_, _ = _booked(booked, at)
    prefill = pool.prefill_capacity_tps
    return (max(0, pool.capacity_tps - g - out),
            max(0, prefill - gi - in_) if prefill is not None else 0)


def _pool_states(pool_ids: set[int], now: datetime,
                 bookings: dict[int, list[_Booked]] | None = None) -> dict[int, PoolState]:
    """Each pool's headroom (capacity minus every guarantee in force, output and input, as
    bookings change it) and its output estimate default and floor."""
    if bookings is None:
        bookings = _bookings_by_pool(pool_ids, now)
    sums = {pool_id: (g or 0, gi or 0) for pool_id, g, gi in
            allocations_in_force(now=now).filter(pool_id__in=pool_ids).values("pool_id")
            .annotate(g=Sum("guaranteed_tps"), gi=Sum("guaranteed_input_tps"))
            .values_list("pool_id", "g", "gi")}
    states = {}
    for pool in CapacityPool.objects.filter(pk__in=pool_ids):
        g, gi = sums.get(pool.pk, (0, 0))
        booked = bookings.get(pool.pk, [])
        edges = _edges(booked, now)
        h, hi = _headroom(pool, g, gi, booked, _before(edges, now))
        states[pool.pk] = PoolState(
            headroom_tps=h, input_headroom_tps=hi,
            estimate_default=pool.output_estimate_default,
            estimate_floor=pool.output_estimate_floor,
            lease_ttl_ms=pool.lease_ttl_seconds * 1000,
            schedule=tuple((epoch_ms(t), *_headroom(pool, g, gi, booked, t)) for t in edges))
    return states


def _keys_by_org(org_ids: set[int], now: datetime) -> dict[int, list[ApiKey]]:
    usable = ApiKey.objects.filter(org_id__in=org_ids, revoked_at__isnull=True).filter(
        Q(expires_at__isnull=True) | Q(expires_at__gt=now))
    result: dict[int, list[ApiKey]] = defaultdict(list)
    for key in usable.only("pk", "org_id", "digest", "expires_at", "default_service_tier",
                           "slice_output_tps", "slice_input_tps", "slice_daily_tokens",
                           "slice_max_concurrency"):
        result[key.org_id].append(key)
    return result


def _key_state(key: ApiKey, day_used: int) -> ApiKeyState:
    key_slice = None
    if key.has_slice:
        key_slice = KeySliceState(output_tps=key.slice_output_tps or 0,
                                  input_tps=key.slice_input_tps or 0,
                                  daily_tokens=key.slice_daily_tokens or 0,
                                  max_concurrency=key.slice_max_concurrency or 0)
    return ApiKeyState(key_id=key.pk, digest=key.digest,
                       expires_ms=epoch_ms(key.expires_at) if key.expires_at else 0,
                       default_tier=key.default_service_tier, slice=key_slice,
                       day_used_tokens=day_used)


def _day_used(org_ids: set[int], pool_ids: set[int], now: datetime) -> dict:
    """(org, pool) and (org, pool, key) -> tokens recorded this UTC day (metering answers)."""
    start = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    used: dict = defaultdict(int)
    day_usage_reading.emit(org_ids=frozenset(org_ids), pool_ids=frozenset(pool_ids),
                           day_start=start, used=used)
    return used


def _siblings(pools) -> dict[int, list[CapacityPool]]:
    """Each pool's siblings: the same model in the same region on another tier."""
    pairs = {(p.model, p.region) for p in pools}
    query = Q()
    for model, region in pairs:
        query |= Q(model=model, region=region)
    found: dict = defaultdict(list)
    for sibling in CapacityPool.objects.filter(query) if pairs else []:
        found[(sibling.model, sibling.region)].append(sibling)
    return {p.pk: [s for s in found[(p.model, p.region)] if s.pk != p.pk] for p in pools}


def _memberships(*, org_ids=None, pool_ids=None, now: datetime) -> list[_OrgInPool]:
    """Every (org, pool) pair with an allocation, past or present: an org whose allocation ended
    keeps its keys known in the pool, so its callers get 403 rather than "unknown key". Its
    keys are known (without an allocation) in the pool's siblings too, so a request routed to
    another tier of the model is refused no_allocation, not as an unknown key."""
    allocations = Allocation.objects.select_related("org", "pool")
    if org_ids is not None:
        allocations = allocations.filter(org_id__in=org_ids)
    if pool_ids is not None:
        pools = list(CapacityPool.objects.filter(pk__in=pool_ids))
        nearby = {p.pk for p in pools} | {s.pk for ss in _siblings(pools).values() for s in ss}
        allocations = allocations.filter(pool_id__in=nearby)
    in_force = set(allocations_in_force(now=now).values_list("pk", flat=True))
    pairs: dict[tuple[int, int], _OrgInPool] = {}
    for a in allocations.order_by("pk"):
        current = pairs.get((a.org_id, a.pool_id))
        if current is None or current.allocation is None:
            pairs[(a.org_id, a.pool_id)] = _OrgInPool(a.org, a.pool,
                                                      a if a.pk in in_force else None)
    siblings = _siblings({m.pool for m in pairs.values()})
    for m in list(pairs.values()):
        for sibling in siblings[m.pool.pk]:
            pairs.setdefault((m.org.pk, sibling.pk), _OrgInPool(m.org, sibling, None))
    wanted = None if pool_ids is None else set(pool_ids)
    return ([m for m in pairs.values() if wanted is None or m.pool.pk in wanted]
            + _unallocated(org_ids=org_ids, pool_ids=pool_ids))


# Orgs whose keys a pool knows although they never held an allocation anywhere.
_KNOWN_WITHOUT_ALLOCATION = (OrgStatus.ACTIVE, OrgStatus.SUSPENDED)


def _unallocated(*, org_ids=None, pool_ids=None) -> list[_OrgInPool]:
    """An admitted org that holds no allocation at all, in every pool (asked): its keys are
    known there without an allocation, so its callers hear 403 no_allocation (or why the org is
    not active), not 401 "unknown key". Few orgs: admission grants an allocation; they leave
    these pools' registries when they get one and the pools are rebuilt (meanwhile such a pool
    still answers no_allocation, which is true)."""
    orgs = (Organization.objects.filter(status__in=_KNOWN_WITHOUT_ALLOCATION)
            .exclude(pk__in=Allocation.objects.values("org_id")).order_by("pk"))
    if org_ids is not None:
        orgs = orgs.filter(pk__in=org_ids)
    orgs = list(orgs)
    if not orgs:
        return []
    pools = CapacityPool.objects.order_by("pk")
    if pool_ids is not None:
        pools = pools.filter(pk__in=pool_ids)
    return [_OrgInPool(org, pool, None) for pool in pools for org in orgs]


def _org_state(m: _OrgInPool, *, keys: list[ApiKeyState], day_used: int, money: _Money,
               bookings: list[_Booked], now: datetime) -> OrgState:
    a, org_id, pool_id = m.allocation, m.org.pk, m.pool.pk
    cap, month_to_date = money.spend.get(org_id, (0, 0))
    input_price, output_price = money.prices.get((org_id, pool_id), (0, 0))
    apart = a is not None and a.guaranteed_input_tps is not None
    g, gi = (a.guaranteed_tps if a else 0), (a.guaranteed_input_tps if apart else 0)
    daily = a.daily_tokens if a else 0
    booked = [b for b in bookings if b.org_id == org_id] if a else []
    edges = _edges(booked, now)
    out, in_, extra = _booked(booked, _before(edges, now))
    return OrgState(
        org_id=org_id, status=m.org.status, suspension_reason=m.org.suspension_reason,
        has_allocation=a is not None, guaranteed_tps=g + out,
        burst_tps=a.burst_tps - a.guaranteed_tps if a else 0,
        input_guaranteed_tps=gi + in_ if apart else 0,
        input_burst_tps=a.burst_input_tps - a.guaranteed_input_tps if apart else 0,
        daily_tokens=daily + extra, max_concurrency=a.max_concurrency if a else 0,
        spend_cap_micros=cap, day_used_tokens=day_used, month_spend_micros=month_to_date,
        input_micros_per_mtok=input_price, output_micros_per_mtok=output_price,
        api_keys=keys, schedule=tuple(
            LimitsChange(at_ms=epoch_ms(t), guaranteed_tps=g + o, daily_tokens=daily + d,
                         input_guaranteed_tps=gi + i if apart else 0)
            for t in edges for o, i, d in [_booked(booked, t)]))


def _publish(*, org_ids=None, pool_ids=None) -> int:
    now = clock.now()
    members = _memberships(org_ids=org_ids, pool_ids=pool_ids, now=now)
    orgs = {m.org.pk for m in members}
    pools = {m.pool.pk for m in members}
    bookings = _bookings_by_pool(pools, now)
    pool_states = _pool_states(pools, now, bookings)
    keys = _keys_by_org(orgs, now)
    used = _day_used(orgs, pools, now)
    money = _money(orgs, pools, now)
    for m in members:
        org_id, pool_id = m.org.pk, m.pool.pk
        key_states = [_key_state(k, used.get((org_id, pool_id, k.pk), 0))
                      for k in keys.get(org_id, [])]
        state = _org_state(m, keys=key_states, day_used=used.get((org_id, pool_id), 0),
                           money=money, bookings=bookings.get(pool_id, []), now=now)
        limiter_org_publish(pool_id=pool_id, org=state, pool=pool_states[pool_id], now=now)
    return len(members)


def limits_publish_orgs(*, org_ids) -> int:
    """Push these orgs' state to every pool they have (had) an allocation in. Returns the
    (org, pool) pairs written."""
    return _publish(org_ids=org_ids)


def limits_publish_pools(*, pool_ids) -> None:
    """Push these pools' own values (headroom, estimate default and floor): one script call per
    pool, whatever its number of orgs."""
    for pool_id, state in _pool_states(set(pool_ids), clock.now()).items():
        limiter_pool_publish(pool_id=pool_id, pool=state)


def limiter_sync_pool(*, pool_id: int) -> int:
    """Rebuild one pool from PostgreSQL, then mark it synced. Returns the orgs written."""
    written = _publish(pool_ids=[pool_id])
    limiter_pool_synced_mark(pool_id=pool_id)
    return written


def limiter_pool_rebuild(*, pool_id: int) -> None:
    """The engine's `pool_rebuild`, called by an authorize that found the pool unsynced: one
    rebuild per pool at a time, the concurrent callers wait for it (quotas/limiter/rebuild.py).
    Raises LimiterUnavailable when it cannot be done, PostgreSQL unreachable included."""
    def rebuild() -> None:
        try:
            limiter_sync_pool(pool_id=pool_id)
        except DatabaseError as exc:
            raise LimiterUnavailable(f"pool {pool_id} cannot be rebuilt: {exc}") from exc

    limiter_pool_rebuild_once(pool_id=pool_id, rebuild=rebuild, lock_ttl_s=REBUILD_LOCK_SECONDS,
                              wait_s=REBUILD_WAIT_SECONDS)


def limiter_sync_all() -> dict[int, int]:
    """Rebuild every pool, and the gateway tokens. Returns the orgs written per pool."""
    gateway_tokens_sync()
    return {pool_id: limiter_sync_pool(pool_id=pool_id)
            for pool_id in CapacityPool.objects.order_by("pk").values_list("pk", flat=True)}


def gateway_tokens_usable() -> dict[str, str]:
    """Every gateway token not revoked, as the hook reads them: digest -> "<id>:<name>"."""
    return {digest: f"{pk}:{name}" for pk, digest, name in
            GatewayToken.objects.filter(revoked_at__isnull=True).values_list("pk", "digest",
                                                                             "name")}


def gateway_tokens_publish() -> dict[str, str]:
    """Write every usable gateway token to Redis; returns them. Raises LimiterUnavailable."""
    tokens = gateway_tokens_usable()
    gateway_tokens_write(tokens)
    return tokens


def gateway_tokens_sync() -> None:
    """Beat (in limiter_sync): publish the tokens, and copy into PostgreSQL when the web
    processes last saw each used (they record it in Redis, never in PostgreSQL)."""
    gateway_tokens_publish()
    for token_id, epoch_s in gateway_tokens_used_read().items():
        at = datetime.fromtimestamp(epoch_s, UTC)
        GatewayToken.objects.filter(pk=token_id).exclude(last_used_at__gte=at).update(
            last_used_at=at)


def _gateway_tokens_publish_now_or_queue() -> None:
    from quotas.tasks import gateway_tokens_publish_task  # the tasks module imports this one

    try:
        gateway_tokens_publish()
    except LimiterUnavailable:
        logger.warning("gateway tokens publish failed; queued a retry")
        try:
            gateway_tokens_publish_task.apply_async(retry=False)
        except Exception:
            # The broker shares Redis: limiter_sync (beat) publishes them when it is back.
            logger.exception("could not queue the gateway tokens publish")


def gateway_tokens_publish_later() -> None:
    """After the commit, publish the tokens: a revocation reaches every web process within
    its refresh (quotas/hook/gateway_tokens.py)."""
    transaction.on_commit(_gateway_tokens_publish_now_or_queue)


def _now_or_queue(publish, task, *, entity: str, ids: set[int]) -> None:
    """Publish directly (a suspension must stop traffic within a second); if Redis is down, hand
    each publish to a Celery task that retries with backoff."""
    try:
        publish(ids)
    except LimiterUnavailable:
        for pk in sorted(ids):
            logger.warning("limiter publish of %s %s failed; queued a retry", entity, pk)
            try:
                task.apply_async(kwargs={f"{entity}_id": pk}, retry=False)
            except Exception:
                # The broker shares Redis: when both are down, the periodic limiter_sync (beat)
                # is what brings this state back.
                logger.exception("could not queue the limiter publish of %s %s", entity, pk)


def limits_publish_orgs_now_or_queue(org_ids: set[int]) -> None:
    from quotas.tasks import limits_publish_org  # the tasks module imports this one

    _now_or_queue(lambda ids: limits_publish_orgs(org_ids=ids), limits_publish_org,
                  entity="org", ids=org_ids)


def limits_publish_pools_now_or_queue(pool_ids: set[int]) -> None:
    from quotas.tasks import limits_publish_pool  # the tasks module imports this one

    _now_or_queue(lambda ids: limits_publish_pools(pool_ids=ids), limits_publish_pool,
                  entity="pool", ids=pool_ids)


def limits_publish_org_later(*, org_id: int) -> None:
    on_commit_collect(limits_publish_orgs_now_or_queue, org_id)


def limits_publish_pool_later(*, pool_id: int) -> None:
    on_commit_collect(limits_publish_pools_now_or_queue, pool_id)


def _org_pool_ids(org_id: int) -> list[int]:
    return list(Allocation.objects.filter(org_id=org_id).values_list("pool_id", flat=True)
                .distinct().order_by("pool_id"))


def spend_add(*, org_id: int, month: str, micros: int) -> None:
    """Add spend (micro-dollars) to the org's month counter in every pool it holds an
    allocation in. Raises LimiterUnavailable when Redis cannot be reached."""
    limiter_spend_add(pool_ids=_org_pool_ids(org_id), org_id=org_id, month=month, micros=micros)


def spend_cap_set(*, org_id: int, micros: int) -> None:
    """Write a cap straight to Redis (0 = none). The org publish writes the same field from
    billing's cap (`limits_publishing`), so billing normally sets caps through that."""
    limiter_spend_cap_set(pool_ids=_org_pool_ids(org_id), org_id=org_id, micros=micros)
