"""The Python face of the admission engine: one EVALSHA per decision.

`limiter_authorize` hashes the presented API key (Redis only ever sees digests), runs
authorize.lua in the pool's slot, and decodes the reply into a `Decision`. When the pool's key
registry is missing (Redis flushed or restarted), it calls the configured `pool_rebuild` and
asks once more: the engine itself never reads a database.
"""

from datetime import datetime
from functools import cache
from typing import NamedTuple

from quotas.limiter.clock import clock, day_stamp, epoch_ms, month_stamp
from quotas.limiter.connection import EngineConfig, engine_config, script_run
from quotas.limiter.schema import (
    KEY,
    UNSYNCED,
    AuthorizeArgs,
    AuthorizeKeys,
    Decision,
    HeldReservation,
    LookupArgs,
    SettleArgs,
    SettleKeys,
    Settlement,
    field_names,
    pool_key,
    reply_decode,
)
from sluice.secrets import secret_digest  # Django-free, like the engine

# How long a reservation's record outlives its expiry: a late usage report still finds it.
RECORD_GRACE_MS = 6 * 3600 * 1000
_SETTLEMENT_FIELDS = field_names(Settlement)


class _PoolKeys(NamedTuple):
    registry: str
    synced: str
    pool: str
    headroom_bucket: str


@cache
def _pool_keys(pool_id: int) -> _PoolKeys:
    return _PoolKeys(registry=pool_key(pool_id, KEY.registry),
                     synced=pool_key(pool_id, KEY.synced), pool=pool_key(pool_id, KEY.pool),
                     headroom_bucket=pool_key(pool_id, KEY.headroom_bucket))


def _authorize_once(*, pool_id: int, digest: str, request_id: str, cost: int,
                    dry_run: bool, now: datetime, config: EngineConfig) -> Decision:
    pool = _pool_keys(pool_id)
    ttl_ms = config.reservation_ttl_s * 1000
    keys = AuthorizeKeys(registry=pool.registry, synced=pool.synced, pool=pool.pool,
                         headroom_bucket=pool.headroom_bucket,
                         reservation=pool_key(pool_id, KEY.reservation, request_id))
    args = AuthorizeArgs(digest=digest, request_id=request_id, cost=cost, now_ms=epoch_ms(now),
                         day=day_stamp(now), month=month_stamp(now), ttl_ms=ttl_ms,
                         dry_run=int(dry_run), record_ttl_ms=ttl_ms + RECORD_GRACE_MS)
    return reply_decode(Decision, script_run("authorize", keys=keys, args=args))


def limiter_authorize(*, pool_id: int, api_key: str, request_id: str, input_tokens: int,
                      max_output_tokens: int, dry_run: bool = False) -> Decision:
    """Raises LimiterUnavailable when Redis cannot be reached."""
    config = engine_config()
    kwargs = dict(pool_id=pool_id, digest=secret_digest(api_key), request_id=request_id,
                  cost=input_tokens + max_output_tokens, dry_run=dry_run, now=clock.now(),
                  config=config)
    decision = _authorize_once(**kwargs)
    if decision.outcome == UNSYNCED:
        if config.pool_rebuild is not None:
            config.pool_rebuild(pool_id=pool_id)
            decision = _authorize_once(**kwargs)
        if decision.outcome == UNSYNCED:  # the pool still has no state for this key's org
            decision = Decision(outcome="invalid_api_key")
    return decision


def limiter_settle(*, pool_id: int, settlements: list[Settlement]) -> int:
    """Settle finished requests of one pool in one script call. Idempotent by request_id."""
    if not settlements:
        return 0
    now = clock.now()
    pool = _pool_keys(pool_id)
    keys = [*SettleKeys(pool=pool.pool, headroom_bucket=pool.headroom_bucket),
            *(pool_key(pool_id, KEY.reservation, s.request_id) for s in settlements)]
    args = [*SettleArgs(now_ms=epoch_ms(now), day=day_stamp(now),
                        record_ttl_ms=engine_config().reservation_ttl_s * 1000 + RECORD_GRACE_MS),
            *(getattr(s, name) for s in settlements for name in _SETTLEMENT_FIELDS)]
    return script_run("settle", keys=keys, args=args, bulk=True)


def limiter_reservations_lookup(*, pool_id: int,
                                request_ids: list[str]) -> list[HeldReservation | None]:
    """Per request_id: the reservation the pool holds for it, or None. One script call."""
    if not request_ids:
        return []
    replies = script_run("lookup", args=LookupArgs(now_ms=epoch_ms(clock.now())), bulk=True,
                         keys=[pool_key(pool_id, KEY.reservation, r) for r in request_ids])
    return [None if reply is None else reply_decode(HeldReservation, reply)
            for reply in replies]
