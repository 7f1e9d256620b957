"""Admission while Redis is unreachable, for pools whose policy is fail_open.

Each process admits an org's requests under a local token bucket at the org's guaranteed rate;
concurrency and the daily quota are not enforced (they live in Redis). Keys and limits come from
PostgreSQL, remembered for CACHE_SECONDS. Usage is still recorded in PostgreSQL, and the
reservation_id lets the usage report attribute it.
"""

import threading
import time
from dataclasses import dataclass

from orgs.models import ApiKey, OrgStatus, SuspensionReason
from quotas.limiter.clock import clock, ms_until_next_utc_day
from quotas.limiter.schema import ALLOWED, Decision
from quotas.limiter.state import BUCKET_SECONDS
from quotas.selectors import allocations_in_force
from sluice.secrets import secret_digest, secret_parse_lookup

CACHE_SECONDS = 30.0
# Unknown keys are remembered too (so guessing does not hammer PostgreSQL); bound the memory.
CACHE_MAX_ENTRIES = 50_000


@dataclass(frozen=True)
class _Caller:
    org_id: int
    api_key_id: int
    refusal: str | None  # a refusal code, or None when the org may use the pool
    guaranteed_tps: int
    daily_tokens: int
    max_concurrency: int


_callers: dict[tuple[str, int], tuple[_Caller | None, float]] = {}
_buckets: dict[tuple[int, int], tuple[float, float]] = {}
_lock = threading.Lock()


def _caller_load(api_key: str, pool_id: int) -> _Caller | None:
    lookup = secret_parse_lookup(api_key, kind="sk")
    key = ApiKey.objects.select_related("org").filter(lookup=lookup).first() if lookup else None
    if key is None or key.digest != secret_digest(api_key) or not key.is_usable():
        return None
    allocation = allocations_in_force().filter(org_id=key.org_id, pool_id=pool_id).first()
    refusal = None
    if key.org.status != OrgStatus.ACTIVE:
        payment = key.org.suspension_reason == SuspensionReason.PAYMENT
        refusal = "payment_required" if payment else "org_not_active"
    elif allocation is None:
        refusal = "no_allocation"
    return _Caller(key.org_id, key.pk, refusal,
                   allocation.guaranteed_tps if allocation else 0,
                   allocation.daily_tokens if allocation else 0,
                   allocation.max_concurrency if allocation else 0)


def _caller(api_key: str, pool_id: int) -> _Caller | None:
    cache_key = (secret_digest(api_key), pool_id)
    hit = _callers.get(cache_key)
    if hit is not None and hit[1] > time.monotonic():
        return hit[0]
    caller = _caller_load(api_key, pool_id)
    if len(_callers) >= CACHE_MAX_ENTRIES:
        _callers.clear()
    _callers[cache_key] = (caller, time.monotonic() + CACHE_SECONDS)
    return caller


def _take(caller: _Caller, pool_id: int, cost: int) -> tuple[bool, float, int]:
    """Debit the local bucket; returns (admitted, level after, retry ms)."""
    rate = caller.guaranteed_tps
    capacity = rate * BUCKET_SECONDS
    now = time.monotonic()
    with _lock:
        level, at = _buckets.get((pool_id, caller.org_id), (capacity, now))
        level = min(capacity, level + (now - at) * rate)
        admitted = level >= cost
        if admitted:
            level -= cost
        _buckets[(pool_id, caller.org_id)] = (level, now)
    retry = 0 if admitted else int((cost - level) * 1000 / max(rate, 1)) + 1
    return admitted, level, retry


def fail_open_authorize(*, pool_id: int, api_key: str, cost: int) -> Decision:
    caller = _caller(api_key, pool_id)
    if caller is None:
        return Decision(outcome="invalid_api_key")
    if caller.refusal:
        return Decision(outcome=caller.refusal, org_id=caller.org_id,
                        api_key_id=caller.api_key_id)
    admitted, level, retry = _take(caller, pool_id, cost)
    capacity = caller.guaranteed_tps * BUCKET_SECONDS
    return Decision(
        outcome=ALLOWED if admitted else "tps_exceeded", org_id=caller.org_id,
        api_key_id=caller.api_key_id, reserved_tokens=cost if admitted else 0,
        retry_after_ms=None if admitted else retry, tokens_limit=capacity,
        tokens_remaining=int(level),
        tokens_reset_ms=int((capacity - level) * 1000 / max(caller.guaranteed_tps, 1)),
        day_limit=caller.daily_tokens, day_remaining=caller.daily_tokens,
        day_reset_ms=ms_until_next_utc_day(clock.now()),
        requests_limit=caller.max_concurrency, requests_remaining=caller.max_concurrency,
    )


def fail_open_reset() -> None:
    with _lock:
        _callers.clear()
        _buckets.clear()
