"""Admission while Redis is unreachable, for pools whose policy is fail_open.

The whole fleet admits an org at most at its guaranteed rate. While Redis is up, every process
that serves authorize records a heartbeat there every HEARTBEAT_SECONDS and learns how many
processes did so within LIVE_SECONDS (quotas/limiter/fleet.py). Without Redis, each process
admits an org under a local token bucket holding its share: the guaranteed rate divided by the
count it learned last (a process that never learned it, because it started during the outage,
assumes settings.FAIL_OPEN_PROCESSES). docs/faults.md, "Redis down", lists
what this does not cover. Concurrency and the daily quota are not enforced (they live in Redis).
Keys and limits come from PostgreSQL, remembered for CACHE_SECONDS. Usage is still recorded in
PostgreSQL, and the reservation_id lets the usage report attribute it.
"""

import os
import threading
import time
import uuid
from dataclasses import dataclass

from django.conf import settings
from django.db import DatabaseError

from orgs.models import ApiKey, OrgStatus, SuspensionReason
from quotas.limiter.aio import Claim, background
from quotas.limiter.clock import clock, epoch_ms, ms_until_next_utc_day
from quotas.limiter.connection import LimiterUnavailable
from quotas.limiter.fleet import fleet_heartbeat
from quotas.limiter.schema import ALLOWED, Decision
from quotas.limiter.state import BUCKET_SECONDS
from quotas.selectors import allocations_in_force
from sluice.secrets import secret_digest, secret_parse_lookup

CACHE_SECONDS = 30.0
# Unknown keys are remembered too (so guessing does not hammer PostgreSQL); bound the memory.
CACHE_MAX_ENTRIES = 50_000
HEARTBEAT_SECONDS = 5.0
LIVE_SECONDS = 30.0


@dataclass(frozen=True)
class _Caller:
    org_id: int
    api_key_id: int
    refusal: str | None  # a refusal code, or None when the org may use the pool
    guaranteed_tps: int
    daily_tokens: int
    max_concurrency: int


class _Fleet:
    """This process's heartbeat, and the fleet size it learned from everyone's."""

    def __init__(self) -> None:
        self.pid = 0
        self.process_id = ""
        self.size: int | None = None  # None: never counted (Redis down since we started)
        self.next_beat = float("-inf")
        self.claim = Claim()  # who schedules the heartbeat that is due
        self.lock = threading.Lock()

    def beat(self) -> None:
        if time.monotonic() < self.next_beat or not self.lock.acquire(blocking=False):
            return
        try:
            if self.pid != os.getpid():  # first beat, or a worker forked from the master
                self.pid = os.getpid()
                self.process_id = f"{os.uname().nodename}:{self.pid}:{uuid.uuid4().hex[:8]}"
            self.size = fleet_heartbeat(process_id=self.process_id,
                                        now_ms=epoch_ms(clock.now()),
                                        live_ms=int(LIVE_SECONDS * 1000))
        except LimiterUnavailable:
            pass  # the last count stays; the next beat tries again
        finally:
            # Set once the beat is over: a decision that found it under way claimed the value
            # before (its beat returned at once), and the next decision due claims this one.
            self.next_beat = time.monotonic() + HEARTBEAT_SECONDS
            self.lock.release()

    def share(self) -> int:
        return max(1, self.size or settings.FAIL_OPEN_PROCESSES)


_callers: dict[tuple[str, int], tuple[_Caller | None, float]] = {}
_buckets: dict[tuple[int, int], tuple[float, float]] = {}
_lock = threading.Lock()
_fleet = _Fleet()


def fail_open_heartbeat() -> None:
    """Called on the event loop after each decision Redis took: a heartbeat, in the
    background, when one is due (at most one per HEARTBEAT_SECONDS)."""
    fleet = _fleet
    if time.monotonic() >= fleet.next_beat and fleet.claim.take(fleet.next_beat):
        background(fleet.beat)


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
    try:
        caller = _caller_load(api_key, pool_id)
    except DatabaseError as exc:  # Redis and PostgreSQL both down: nothing to decide with
        raise LimiterUnavailable(f"fail-open cannot read the caller: {exc}") from exc
    if len(_callers) >= CACHE_MAX_ENTRIES:
        _callers.clear()
    _callers[cache_key] = (caller, time.monotonic() + CACHE_SECONDS)
    return caller


def _take(rate: float, capacity: float, pool_id: int, org_id: int,
          cost: int) -> tuple[bool, float, int]:
    """Debit the local bucket; returns (admitted, level after, retry ms)."""
    now = clock.now().timestamp()
    with _lock:
        level, at = _buckets.get((pool_id, org_id), (capacity, now))
        level = min(capacity, level + max(0.0, now - at) * rate)
        admitted = level >= cost
        if admitted:
            level -= cost
        _buckets[(pool_id, org_id)] = (level, now)
    retry = 0 if admitted else int((cost - level) * 1000 / max(rate, 1)) + 1
    return admitted, level, retry


def fail_open_authorize(*, pool_id: int, api_key: str, cost: int) -> Decision:
    """Raises LimiterUnavailable when PostgreSQL cannot be read either."""
    caller = _caller(api_key, pool_id)
    if caller is None:
        return Decision(outcome="invalid_api_key")
    if caller.refusal:
        return Decision(outcome=caller.refusal, org_id=caller.org_id,
                        api_key_id=caller.api_key_id)
    rate = caller.guaranteed_tps / _fleet.share()
    capacity = rate * BUCKET_SECONDS
    admitted, level, retry = _take(rate, capacity, pool_id, caller.org_id, cost)
    return Decision(
        outcome=ALLOWED if admitted else "tps_exceeded", org_id=caller.org_id,
        api_key_id=caller.api_key_id, reserved_tokens=cost if admitted else 0,
        retry_after_ms=None if admitted else retry, tokens_limit=int(capacity),
        tokens_remaining=int(level),
        tokens_reset_ms=int((capacity - level) * 1000 / max(rate, 1)),
        day_limit=caller.daily_tokens, day_remaining=caller.daily_tokens,
        day_reset_ms=ms_until_next_utc_day(clock.now()),
        requests_limit=caller.max_concurrency, requests_remaining=caller.max_concurrency,
    )


def fail_open_reset() -> None:
    global _fleet
    with _lock:
        _callers.clear()
        _buckets.clear()
        _fleet = _Fleet()
