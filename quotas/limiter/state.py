"""What the admission engine knows, written: orgs and their keys, pools' own values, spend.

The caller says what is true (quotas/publish.py reads it from PostgreSQL); these functions turn
it into the engine's stored form, one script call per org and pool, or per pool.
"""

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

import redis

from quotas.limiter.clock import day_stamp, epoch_ms, month_stamp
from quotas.limiter.connection import LimiterUnavailable, limiter_client, script_run
from quotas.limiter.schema import (
    KEY,
    LEASE_TTL_DEFAULT_MS,
    ORG,
    POOL,
    Guarantee,
    GuaranteeArgs,
    GuaranteeKeys,
    OrgPublishArgs,
    OrgPublishKeys,
    OrgPublishState,
    PoolPublishArgs,
    PoolPublishKeys,
    pool_key,
    reply_decode,
    stored_values,
)

# A TPS bucket holds this many seconds of its rate: an idle org may send that much at once,
# and one request can reserve at most (guaranteed + burst) x BUCKET_SECONDS tokens.
BUCKET_SECONDS = 10
SPEND_COUNTER_SECONDS = 40 * 86400  # a month's counter outlives the month


@dataclass(frozen=True)
class KeySliceState:
    """An API key's own limits inside its org's allocation (0 = none of its own)."""
    output_tps: int = 0  # with input metered apart; else input and output together
    input_tps: int = 0  # ignored in a pool that meters input with output
    daily_tokens: int = 0
    max_concurrency: int = 0


@dataclass(frozen=True)
class ApiKeyState:
    key_id: int
    digest: str  # SHA-256 of the key
    expires_ms: int  # epoch ms, 0 = never
    default_tier: str = "auto"  # the service tier of requests that ask for `auto` (KEY_TIERS)
    slice: KeySliceState | None = None
    day_used_tokens: int = 0  # recorded so far this UTC day (floor of the key's day counter)


@dataclass(frozen=True)
class LimitsChange:
    """The org's limits from `at_ms` on (a booking's first or last second): what bookings add
    to an allocation."""
    at_ms: int
    guaranteed_tps: int
    input_guaranteed_tps: int
    daily_tokens: int


@dataclass(frozen=True)
class OrgState:
    """One org as one pool sees it. An org whose allocation ended is still published (without
    one), so its keys stay known and its callers hear no_allocation, not "unknown key"."""
    org_id: int
    status: str
    suspension_reason: str
    has_allocation: bool  # an allocation in force; the limits below are its, else 0
    guaranteed_tps: int  # output; input and output together when input_guaranteed_tps is 0
    burst_tps: int  # on top of the guarantee
    daily_tokens: int
    max_concurrency: int
    spend_cap_micros: int  # 0 = none
    day_used_tokens: int  # recorded so far this UTC day
    month_spend_micros: int  # rated so far this month
    api_keys: list[ApiKeyState]
    input_guaranteed_tps: int = 0  # 0: the pool meters input with output
    input_burst_tps: int = 0  # on top of the input guarantee
    # What a reservation holds against the spend cap per million tokens, premium included.
    input_micros_per_mtok: int = 0
    output_micros_per_mtok: int = 0
    # Changes of the limits above, in time order; authorize applies each at its instant. The
    # limits above are those before the first.
    schedule: tuple[LimitsChange, ...] = ()


@dataclass(frozen=True)
class PoolState:
    """A pool's own values: what bursts borrow (capacity minus every guarantee in force), and
    the output estimate of an org without history."""
    headroom_tps: int
    estimate_default: int  # output tokens
    estimate_floor: int
    input_headroom_tps: int = 0  # 0 with no prefill capacity declared
    lease_ttl_ms: int = LEASE_TTL_DEFAULT_MS  # how long a lease lives without a heartbeat
    # (epoch ms, headroom tokens/s, input headroom tokens/s) from then on, in time order.
    schedule: tuple[tuple[int, int, int], ...] = ()


def _pool_values(pool: PoolState, headroom_tps: int | None = None,
                 input_headroom_tps: int | None = None) -> dict:
    h = pool.headroom_tps if headroom_tps is None else headroom_tps
    hi = pool.input_headroom_tps if input_headroom_tps is None else input_headroom_tps
    return stored_values(
        POOL, headroom_rate=h, headroom_capacity=h * BUCKET_SECONDS, input_headroom_rate=hi,
        input_headroom_capacity=hi * BUCKET_SECONDS, estimate_default=pool.estimate_default,
        estimate_floor=pool.estimate_floor, lease_ttl=pool.lease_ttl_ms)


def _pool_schedule(pool: PoolState) -> list:
    return [[at_ms, _pool_values(pool, h, hi)] for at_ms, h, hi in pool.schedule]


def _org_values(org: OrgState, change: LimitsChange | None = None) -> dict:
    g, gi = org.guaranteed_tps, org.input_guaranteed_tps
    daily = org.daily_tokens
    if change is not None:
        g, gi, daily = change.guaranteed_tps, change.input_guaranteed_tps, change.daily_tokens
    b, bi = org.burst_tps, org.input_burst_tps
    return stored_values(
        ORG, status=org.status, suspension_reason=org.suspension_reason,
        has_allocation=int(org.has_allocation), daily_tokens=daily,
        max_concurrency=org.max_concurrency, spend_cap=org.spend_cap_micros,
        guaranteed_rate=g, guaranteed_capacity=g * BUCKET_SECONDS,
        burst_rate=b, burst_capacity=b * BUCKET_SECONDS,
        input_guaranteed_rate=gi, input_guaranteed_capacity=gi * BUCKET_SECONDS,
        input_burst_rate=bi, input_burst_capacity=bi * BUCKET_SECONDS,
        input_price=org.input_micros_per_mtok, output_price=org.output_micros_per_mtok)


def _slice_values(s: KeySliceState | None) -> dict | None:
    if s is None:
        return None
    return {"output_rate": s.output_tps, "output_capacity": s.output_tps * BUCKET_SECONDS,
            "input_rate": s.input_tps, "input_capacity": s.input_tps * BUCKET_SECONDS,
            "daily_tokens": s.daily_tokens, "max_concurrency": s.max_concurrency}


def _key_entry(org_id: int, k: ApiKeyState) -> dict:
    return {"key_id": k.key_id, "digest": k.digest,
            "entry": f"{org_id}:{k.key_id}:{k.expires_ms}:{k.default_tier}:"
                     f"{int(k.slice is not None)}",
            "slice": _slice_values(k.slice), "day_used": k.day_used_tokens}


def limiter_org_publish(*, pool_id: int, org: OrgState, pool: PoolState,
                        now: datetime) -> None:
    """Replace what the pool knows of `org` (and the pool's own values). Raises
    LimiterUnavailable."""
    state = OrgPublishState(
        org=_org_values(org),
        schedule=[[c.at_ms, _org_values(org, c)] for c in org.schedule],
        pool=_pool_values(pool), pool_schedule=_pool_schedule(pool),
        api_keys=[_key_entry(org.org_id, k) for k in org.api_keys],
        day=day_stamp(now), day_used=org.day_used_tokens, month_spend=org.month_spend_micros,
        month_spend_ttl_s=SPEND_COUNTER_SECONDS)
    keys = OrgPublishKeys(
        registry=pool_key(pool_id, KEY.registry), pool=pool_key(pool_id, KEY.pool),
        org=pool_key(pool_id, KEY.org, org.org_id),
        org_keys=pool_key(pool_id, KEY.org_keys, org.org_id),
        day=pool_key(pool_id, KEY.day, org.org_id, day_stamp(now)),
        spend=pool_key(pool_id, KEY.spend, org.org_id, month_stamp(now)),
        money=pool_key(pool_id, KEY.money, org.org_id))
    script_run("org_publish", keys=keys, bulk=True,
               args=OrgPublishArgs(state=json.dumps(state._asdict())))


def limiter_pool_publish(*, pool_id: int, pool: PoolState) -> None:
    """Set the pool's own values (headroom, estimate default and floor). Raises
    LimiterUnavailable."""
    script_run("pool_publish", keys=PoolPublishKeys(pool=pool_key(pool_id, KEY.pool)),
               args=PoolPublishArgs(**_pool_values(pool),
                                    schedule=json.dumps(_pool_schedule(pool))), bulk=True)


def limiter_org_guarantee(*, pool_id: int, org_id: int, at: datetime) -> Guarantee:
    """The org's guaranteed tokens/s in force at `at` as the engine holds them (bookings
    included, at their exact edges): the weight the admission queue gives it. Raises
    LimiterUnavailable."""
    reply = script_run("guarantee", keys=GuaranteeKeys(org=pool_key(pool_id, KEY.org, org_id)),
                       args=GuaranteeArgs(now_ms=epoch_ms(at)), bulk=True)
    return reply_decode(Guarantee, reply)


def limiter_pool_synced_mark(*, pool_id: int) -> None:
    """The pool was rebuilt in full: from now on a digest it does not know is unknown."""
    _bulk_write(lambda pipe: pipe.set(pool_key(pool_id, KEY.synced), "1"))


def limiter_spend_add(*, pool_ids: Iterable[int], org_id: int, month: str, micros: int) -> None:
    """Add spend (micro-dollars) to the org's month counter in each pool's slot: authorize
    reads the counter of the pool it runs in."""
    def add(pipe):
        for pool_id in pool_ids:
            counter = pool_key(pool_id, KEY.spend, org_id, month)
            pipe.incrby(counter, micros)
            pipe.expire(counter, SPEND_COUNTER_SECONDS)
    _bulk_write(add)


def limiter_spend_cap_set(*, pool_ids: Iterable[int], org_id: int, micros: int) -> None:
    """Set the org's monthly spend cap (0 = none) in each pool's slot."""
    def cap(pipe):
        for pool_id in pool_ids:
            pipe.hset(pool_key(pool_id, KEY.org, org_id), ORG.spend_cap, micros)
    _bulk_write(cap)


def _bulk_write(commands) -> None:
    """Run `commands(pipe)` in one round trip. Raises LimiterUnavailable."""
    pipe = limiter_client(bulk=True).pipeline(transaction=False)
    commands(pipe)
    try:
        pipe.execute()
    except redis.RedisError as exc:
        raise LimiterUnavailable(str(exc)) from exc
