"""The Python face of the admission engine: one EVALSHA per decision.

`limiter_authorize` hashes the presented API key (Redis only ever sees digests), runs
authorize.lua in the pool's slot, and decodes the reply into a `Decision`. When the pool's key
registry is missing (Redis flushed or restarted), it calls the configured `pool_rebuild` and
asks once more: the engine itself never reads a database. Authorize runs on an event loop
(aio.py): the script awaited there, the rebuild in a thread.

Output estimates: settle keeps, per org (and API key) and pool, a histogram of the output
lengths of completed requests, and derives its p95; authorize reserves the smaller of
max_output_tokens and that estimate. The histogram has one field per log-spaced bucket
(floor(8 log2(n + 1)): each spans 9%, so the estimate is at most 9% above the weighted p95 and
never below it), at most 188 fields for lengths up to 10M tokens and typically 20-60 (a few
hundred bytes to ~2 KB of Redis memory per org or key and pool); weights double every
ESTIMATE_HALF_LIFE observations, so the estimate follows the last few hundred requests.
"""

from functools import cache
from itertools import chain
from operator import attrgetter
from typing import NamedTuple

from quotas.limiter.aio import in_thread, script_call
from quotas.limiter.clock import clock, day_stamp, epoch_ms, time_stamps
from quotas.limiter.connection import engine_config, script_run
from quotas.limiter.schema import (
    KEY,
    LEASE_TTL_DEFAULT_MS,
    UNSYNCED,
    AuthorizeArgs,
    AuthorizeKeys,
    Decision,
    ExpiredLease,
    HeldReservation,
    LeaseAnswer,
    LeaseExpireArgs,
    LeaseExpireKeys,
    LeaseMapArgs,
    LeaseMapKeys,
    LeaseUpdateArgs,
    LeaseUpdateKeys,
    LookupArgs,
    SettleArgs,
    SettleKeys,
    Settlement,
    SpillMarkArgs,
    SpillMarkKeys,
    field_names,
    pool_key,
    reply_decode,
)
from sluice.secrets import secret_digest  # Django-free, like the engine

# How long a reservation's record outlives its expiry: a late usage report still finds it.
RECORD_GRACE_MS = 6 * 3600 * 1000
# A settlement's values in the order settle.lua reads them (attrgetter: one C call each).
_settlement_values = attrgetter(*field_names(Settlement))
# An org's (or key's) own estimate is used once it has this many completed requests.
ESTIMATE_MIN_SAMPLES = 20
# After this many further observations, one counts half as much.
ESTIMATE_HALF_LIFE = 128
# An org (key) idle this long starts again from the pool's default (or the org's estimate).
ESTIMATE_TTL_MS = 7 * 86400 * 1000


class _PoolKeys(NamedTuple):
    registry: str
    synced: str
    pool: str
    reservation_prefix: str  # + request_id: that request's reservation


@cache
def _pool_keys(pool_id: int) -> _PoolKeys:
    return _PoolKeys(registry=pool_key(pool_id, KEY.registry),
                     synced=pool_key(pool_id, KEY.synced), pool=pool_key(pool_id, KEY.pool),
                     reservation_prefix=pool_key(pool_id, KEY.reservation, ""))


async def limiter_authorize(*, pool_id: int, api_key: str, request_id: str, input_tokens: int,
                            max_output_tokens: int | None, tier: str = "auto",
                            key_tier: str = "unknown", pool_tier: str = "fast",
                            dry_run: bool = False, digest: str | None = None,
                            lease_owner: str = "", lease_id: str = "", lease_for: str = "",
                            lease_ttl_ms: int = LEASE_TTL_DEFAULT_MS) -> Decision:
    """Decide one request in one pool. `max_output_tokens` None: reserve the output estimate
    alone. `tier` is what the request asked for (auto, priority, default), `pool_tier` the
    pool's (fast, standard), `key_tier` what the caller believes the key's default tier is
    ("unknown" if it has no idea): a mismatch answers TIER_MISMATCH with the key's tier, and
    nothing is reserved. `digest`: the key's, when the caller has it already. Raises
    LimiterUnavailable when Redis cannot be reached. `lease_owner`: the gateway process holding
    it as a lease ("": none), for `lease_ttl_ms`; `lease_id`: its id's signature, signed for
    `lease_for` ("<org>.<key_id>"), or "" (then Decision.lease_mapped is 0: limiter_lease_map)."""
    config = engine_config()
    pool = _pool_keys(pool_id)
    ttl_ms = lease_ttl_ms if lease_owner else config.reservation_ttl_s * 1000
    now_ms = clock.now_ms()
    day, month = time_stamps(now_ms)
    # Positional, in the layouts' order: this runs once per inference request.
    keys = AuthorizeKeys(pool.registry, pool.synced, pool.pool,
                         pool.reservation_prefix + request_id)
    args = AuthorizeArgs(digest or secret_digest(api_key), request_id, input_tokens,
                         -1 if max_output_tokens is None else max_output_tokens, tier, key_tier,
                         pool_tier, now_ms, day, month, ttl_ms, int(dry_run),
                         ttl_ms + RECORD_GRACE_MS, lease_owner, lease_id, lease_for)
    decision = reply_decode(Decision, await script_call("authorize", keys=keys, args=args))
    if decision.outcome == UNSYNCED:
        if config.pool_rebuild is not None:
            await in_thread(config.pool_rebuild, pool_id=pool_id)
            decision = reply_decode(Decision, await script_call("authorize", keys=keys,
                                                                args=args))
        if decision.outcome == UNSYNCED:  # the pool still has no state for this key's org
            decision = Decision(outcome="invalid_api_key")
    return decision


async def limiter_spill_mark(*, pool_id: int, request_id: str, org_id: int) -> None:
    """Mark `request_id` in this pool as served by another one: a retry of it here answers
    SPILLED instead of being admitted twice. Raises LimiterUnavailable."""
    record_ttl_ms = engine_config().reservation_ttl_s * 1000 + RECORD_GRACE_MS
    await script_call("spill_mark",
                      keys=SpillMarkKeys(reservation=pool_key(pool_id, KEY.reservation,
                                                              request_id)),
                      args=SpillMarkArgs(org=org_id, record_ttl_ms=record_ttl_ms))


def limiter_settle(*, pool_id: int, settlements: list[Settlement]) -> int:
    """Settle finished requests of one pool in one script call. Idempotent by request_id."""
    if not settlements:
        return 0
    now = clock.now()
    pool = _pool_keys(pool_id)
    reservation = pool.reservation_prefix
    keys = [*SettleKeys(pool=pool.pool), *[reservation + s.request_id for s in settlements]]
    args = [*SettleArgs(now_ms=epoch_ms(now), day=day_stamp(now),
                        record_ttl_ms=engine_config().reservation_ttl_s * 1000 + RECORD_GRACE_MS,
                        estimate_min_samples=ESTIMATE_MIN_SAMPLES,
                        estimate_half_life=ESTIMATE_HALF_LIFE, estimate_ttl_ms=ESTIMATE_TTL_MS),
            *chain.from_iterable(map(_settlement_values, settlements))]
    return script_run("settle", keys=keys, args=args, bulk=True)


def limiter_reservations_lookup(*, pool_id: int,
                                request_ids: list[str]) -> list[HeldReservation | None]:
    """Per request_id: the reservation the pool holds for it, or None. One script call."""
    if not request_ids:
        return []
    reservation = _pool_keys(pool_id).reservation_prefix
    replies = script_run("lookup", args=LookupArgs(now_ms=epoch_ms(clock.now())), bulk=True,
                         keys=[reservation + r for r in request_ids])
    return [None if reply is None else reply_decode(HeldReservation, reply)
            for reply in replies]


# A released lease whose usage has not come this long after is billed from its progress (and
# replaced by its usage if that comes later): batches come within seconds.
LEASE_RELEASE_GRACE_MS = 120_000
# A lease the sweep claimed but did not settle (it died meanwhile) is claimed again after this.
LEASE_CLAIM_MS = 30_000


class LeaseNamed(NamedTuple):
    """A lease as a heartbeat names it (org and key unverified: the script compares)."""
    signature: str
    org_id: int
    api_key_id: int  # 0: none
    progress: int


async def limiter_lease_map(*, pool_id: int, request_id: str, signature: str) -> None:
    """Map the lease id ending in `signature` to `request_id`. Raises LimiterUnavailable."""
    record_ttl_ms = engine_config().reservation_ttl_s * 1000 + RECORD_GRACE_MS
    await script_call("lease_map", keys=LeaseMapKeys(
        reservation=_pool_keys(pool_id).reservation_prefix + request_id,
        lease_id=pool_key(pool_id, KEY.lease_id, signature)),
        args=LeaseMapArgs(request_id=request_id, record_ttl_ms=record_ttl_ms))


async def limiter_leases_update(*, pool_id: int, owner: str, release: bool,
                                leases: list[LeaseNamed]) -> list[LeaseAnswer]:
    """Renew (or release) `leases` of one pool held by the gateway process `owner`, in one
    script call: a LeaseAnswer per lease, in order. Raises LimiterUnavailable."""
    record_ttl_ms = engine_config().reservation_ttl_s * 1000 + RECORD_GRACE_MS
    keys = [*LeaseUpdateKeys(pool=_pool_keys(pool_id).pool),
            *[pool_key(pool_id, KEY.lease_id, lease.signature) for lease in leases]]
    args = [*LeaseUpdateArgs(now_ms=clock.now_ms(), owner=owner, release=int(release),
                             release_grace_ms=LEASE_RELEASE_GRACE_MS,
                             record_ttl_ms=record_ttl_ms),
            *chain.from_iterable(lease[1:] for lease in leases)]
    replies = await script_call("lease_update", keys=keys, args=args)
    return [reply_decode(LeaseAnswer, reply) for reply in replies]


def limiter_leases_expire(*, pool_id: int, limit: int = 500) -> list[ExpiredLease]:
    """Claim up to `limit` of the pool's due leases, oldest first (lease_expire.lua), claimed
    again if not settled within LEASE_CLAIM_MS. Raises LimiterUnavailable."""
    replies = script_run("lease_expire", bulk=True,
                         keys=LeaseExpireKeys(leases=pool_key(pool_id, KEY.leases)),
                         args=LeaseExpireArgs(now_ms=clock.now_ms(), limit=limit,
                                              claim_ms=LEASE_CLAIM_MS))
    return [reply_decode(ExpiredLease, reply) for reply in replies]
