"""The Python face of the admission engine: one EVALSHA per decision.

`limiter_authorize` hashes the presented API key (Redis only ever sees digests), runs
authorize.lua in the pool's slot, and turns the reply into a `Decision`. When the pool's key
registry is missing (Redis flushed or restarted), it rebuilds the pool from PostgreSQL and asks
once more: that is the only time the database is touched on this path.
"""

from dataclasses import dataclass
from datetime import datetime

import redis
from django.conf import settings

from quotas.limiter.clock import (
    clock,
    day_stamp,
    epoch_ms,
    month_stamp,
    ms_until_next_utc_day,
)
from quotas.limiter.connection import LimiterUnavailable, limiter_client, pool_tag, script_run
from quotas.limiter.sync import limiter_sync_pool
from quotas.models import Allocation
from sluice.secrets import secret_digest

ALLOWED = "allowed"
DUPLICATE = "duplicate"
# How long a reservation's record outlives its expiry: a late usage report still finds it.
RECORD_GRACE_MS = 6 * 3600 * 1000


@dataclass(frozen=True)
class Decision:
    outcome: str  # "allowed", "duplicate", or the refusal code
    org_id: int | None = None
    api_key_id: int | None = None
    reserved_tokens: int = 0
    retry_after_ms: int | None = None
    tokens_limit: int = 0
    tokens_remaining: int = 0
    tokens_reset_ms: int = 0
    day_limit: int = 0
    day_remaining: int = 0
    day_reset_ms: int = 0
    requests_limit: int = 0
    requests_remaining: int = 0
    requests_reset_ms: int = 0

    @property
    def allowed(self) -> bool:
        return self.outcome in (ALLOWED, DUPLICATE)


def _decision(reply: list, now: datetime) -> Decision:
    outcome = reply[0].decode() if isinstance(reply[0], bytes) else reply[0]
    if len(reply) < 3:
        return Decision(outcome=outcome)
    if len(reply) == 3:
        return Decision(outcome=outcome, org_id=int(reply[1]), api_key_id=int(reply[2]))
    n = [int(v) for v in reply[1:]]
    day_reset = ms_until_next_utc_day(now)
    retry = n[3]
    if outcome == "daily_quota_exhausted":
        retry = day_reset
    return Decision(
        outcome=outcome, org_id=n[0], api_key_id=n[1], reserved_tokens=n[2],
        retry_after_ms=None if outcome in (ALLOWED, DUPLICATE) or retry < 0 else retry,
        tokens_limit=n[4], tokens_remaining=n[5], tokens_reset_ms=n[6],
        day_limit=n[7], day_remaining=n[8], day_reset_ms=day_reset,
        requests_limit=n[9], requests_remaining=n[10], requests_reset_ms=n[11],
    )


def _authorize_once(*, pool_id: int, digest: str, request_id: str, cost: int,
                    dry_run: bool, now: datetime) -> Decision:
    tag = pool_tag(pool_id)
    ttl_ms = settings.RESERVATION_TTL_SECONDS * 1000
    reply = script_run(
        "authorize",
        keys=[f"{tag}:keys", f"{tag}:res:{request_id}", f"{tag}:synced"],
        args=[digest, request_id, cost, epoch_ms(now), day_stamp(now), month_stamp(now),
              ttl_ms, "1" if dry_run else "0", ttl_ms + RECORD_GRACE_MS],
    )
    return _decision(reply, now)


def limiter_authorize(*, pool_id: int, api_key: str, request_id: str, input_tokens: int,
                      max_output_tokens: int, dry_run: bool = False) -> Decision:
    """Raises LimiterUnavailable when Redis cannot be reached."""
    now = clock.now()
    kwargs = dict(pool_id=pool_id, digest=secret_digest(api_key), request_id=request_id,
                  cost=input_tokens + max_output_tokens, dry_run=dry_run, now=now)
    decision = _authorize_once(**kwargs)
    if decision.outcome == "unsynced":
        limiter_sync_pool(pool_id=pool_id)
        decision = _authorize_once(**kwargs)
        if decision.outcome == "unsynced":  # the pool still has no state for this key's org
            decision = Decision(outcome="invalid_api_key")
    return decision


@dataclass(slots=True)  # not frozen: a usage batch builds up to 1,000 (frozen __init__ is slow)
class Settlement:
    request_id: str
    org_id: int
    tokens: int  # input + output actually used


def limiter_settle(*, pool_id: int, settlements: list[Settlement]) -> int:
    """Settle finished requests of one pool in one script call. Idempotent by request_id."""
    if not settlements:
        return 0
    now = clock.now()
    args: list = [epoch_ms(now), day_stamp(now),
                  settings.RESERVATION_TTL_SECONDS * 1000 + RECORD_GRACE_MS]
    args.extend([v for s in settlements for v in (s.request_id, s.org_id, s.tokens)])
    return script_run("settle", keys=[f"{pool_tag(pool_id)}:keys"], args=args, bulk=True)


def limiter_reservations_lookup(*, pool_id: int, request_ids: list[str]) -> list:
    """Per request_id: (org_id, api_key_id or None, live) for the reservations the pool holds,
    None for the others. One script call."""
    replies = script_run("lookup", keys=[f"{pool_tag(pool_id)}:keys"],
                         args=[epoch_ms(clock.now()), *request_ids], bulk=True)
    found = []
    for reply in replies:
        if reply is None:
            found.append(None)
            continue
        org, key, live = reply.decode().split(":")
        found.append((int(org), int(key) if key else None, live == "1"))
    return found


def _org_pool_ids(org_id: int) -> list[int]:
    return list(Allocation.objects.filter(org_id=org_id).values_list("pool_id", flat=True)
                .distinct().order_by("pool_id"))


def spend_add(*, org_id: int, month: str, micros: int) -> None:
    """Add spend (micro-dollars) to the org's month counter in every pool slot it holds an
    allocation in: authorize reads the counter of the pool it runs in. Raises
    LimiterUnavailable when Redis cannot be reached."""
    pipe = limiter_client(bulk=True).pipeline(transaction=False)
    for pool_id in _org_pool_ids(org_id):
        counter = f"{pool_tag(pool_id)}:spend:{org_id}:{month}"
        pipe.incrby(counter, micros)
        pipe.expire(counter, 40 * 86400)
    try:
        pipe.execute()
    except redis.RedisError as exc:
        raise LimiterUnavailable(str(exc)) from exc


def spend_cap_set(*, org_id: int, micros: int) -> None:
    """Write a cap straight to Redis (0 = none). The org sync writes the same field from
    billing's cap (`billing_spend_cap_micros`), so billing normally sets caps through that."""
    pipe = limiter_client(bulk=True).pipeline(transaction=False)
    for pool_id in _org_pool_ids(org_id):
        pipe.hset(f"{pool_tag(pool_id)}:org:{org_id}", "scap", micros)
    pipe.execute()
