"""Usage ingestion: durable in PostgreSQL first, then settled in Redis.

One batch is one transaction of set-based statements: each request_id is claimed with INSERT
... ON CONFLICT (request_id) DO NOTHING, the events claimed go in (unnest(...) of the batch),
and the hourly rollups are upserted from exactly the rows inserted, so a retried report is
never counted twice. After the commit, the reservations are settled in Redis (one script call
per pool, idempotent by request_id too): unused tokens are refunded, excess debited, slots
freed.

Attribution: an event names its org, pool and API key through the reservation Redis holds, or
through the signed `reservation_id` authorize returned (which outlives the reservation: usage
that arrives after expiry, or that was admitted while failing open, is still counted).
"""

import logging
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache

import psycopg
from django.conf import settings
from django.db import connection, transaction

from metering.events import UsageCell, usage_recorded
from metering.models import UsageStatus
from metering.partitions import usage_started_at_window
from metering.plausibility import usage_implausible
from orgs.services.api_keys import LAST_USED_RESOLUTION, api_key_touch
from quotas.hook.inputs import UsageInput
from quotas.hook.reservations import (
    ReservationRef,
    reservation_id_parse,
    reservation_id_pool,
)
from quotas.hook.routing import PoolRoute, pool_route_by_id, pool_routes_all
from quotas.limiter.clock import clock, day_stamp_of_ms, epoch_ms
from quotas.limiter.connection import LimiterUnavailable
from quotas.limiter.engine import limiter_reservations_lookup, limiter_settle
from quotas.limiter.schema import Settlement
from quotas.models import Tier

logger = logging.getLogger(__name__)

RECORDED, DUPLICATE, REJECTED = "recorded", "duplicate", "rejected"


@dataclass(slots=True)  # not frozen: up to 1,000 a batch, and frozen __init__ is slow
class UsageResult:
    request_id: str
    result: str
    error_code: str = ""
    error_message: str = ""


@dataclass(slots=True)
class _Row:
    event: UsageInput
    ref: ReservationRef
    unreserved: bool
    ttft_ms: int | None
    output_tps: float | None
    premium_eligible: bool
    started_ms: int  # epoch ms of started_at: its UTC hour (rollup cell) and day (settle)


# epoch ms // this: the UTC hour a cell of the hourly rollups holds.
_HOUR_MS = 3_600_000


@lru_cache(maxsize=256)
def _hour(hour_number: int) -> datetime:
    """The UTC hour starting `hour_number` hours after the epoch, built once per hour: a
    batch's events fall in an hour or two."""
    return datetime.fromtimestamp(hour_number * 3600, UTC)


def usage_speed(event: UsageInput, route: PoolRoute) -> tuple[int | None, float | None, bool]:
    """Time to first token, output tokens/s, and whether the fast tier's promise was kept
    (a fast pool, completed, first token within the ceiling, decoding at or above the floor).
    The premium is billed on fast-tier tokens only: a standard pool's are never eligible."""
    if event.first_token_at is None:
        return None, None, False
    ttft_ms = int((event.first_token_at - event.started_at).total_seconds() * 1000)
    decode_s = (event.finished_at - event.first_token_at).total_seconds()
    output_tps = event.output_tokens / decode_s if decode_s > 0 and event.output_tokens else None
    fast = (route.tier == Tier.FAST and event.status == "completed"
            and ttft_ms <= route.ttft_ceiling_ms
            and (output_tps is None or output_tps >= route.speed_floor_output_tps))
    return ttft_ms, output_tps, fast


def _redis_reservations(events: list[UsageInput], pools: dict[str, int]) -> dict | None:
    """request_id -> (ReservationRef, live) for reservations Redis still holds: one script call
    per pool (the pool the reservation_id names, or every pool for events quoting none). None
    when Redis is unreachable."""
    by_pool: dict[int, list[str]] = defaultdict(list)
    unquoted = [e.request_id for e in events if e.request_id not in pools]
    for e in events:
        if e.request_id in pools:
            by_pool[pools[e.request_id]].append(e.request_id)
    if unquoted:
        for route in pool_routes_all():
            by_pool[route.pool_id].extend(unquoted)
    found = {}
    try:
        for pool_id, request_ids in by_pool.items():
            replies = limiter_reservations_lookup(pool_id=pool_id, request_ids=request_ids)
            for request_id, reply in zip(request_ids, replies, strict=True):
                if reply is not None:
                    org_id, key_id, live = reply
                    found[request_id] = (ReservationRef(pool_id, org_id, key_id), live)
    except LimiterUnavailable as exc:
        logger.warning("usage: reservation lookup failed: %s", exc)
        return None
    return found


def _invalid(request_id: str) -> UsageResult:
    return UsageResult(request_id, REJECTED, "invalid_reservation",
                       "reservation_id was not issued for this request_id.")


def _attribute(events: list[UsageInput]) -> tuple[list[_Row], list[UsageResult]]:
    """Redis is authoritative for the reservations it holds live: those events are attributed
    from Redis and their reservation_id is not verified. Every other event that quotes an id is
    attributed from the id only after its signature checks out (`invalid_reservation` if not),
    so a forged id never attributes usage to anyone; the id's unverified pool only chooses
    which pool Redis is asked."""
    pools, rejected = {}, []
    for e in events:
        if e.reservation_id is None:
            continue
        pool_id = reservation_id_pool(e.reservation_id)
        if pool_id is None:
            rejected.append(_invalid(e.request_id))
        else:
            pools[e.request_id] = pool_id
    if rejected:
        bad = {r.request_id for r in rejected}
        events = [e for e in events if e.request_id not in bad]
    held = _redis_reservations(events, pools)
    routes: dict[int, PoolRoute | None] = {}
    rows = []
    for e in events:
        ref, live = (held or {}).get(e.request_id, (None, False))
        if not live and e.request_id in pools:
            ref = reservation_id_parse(e.reservation_id, request_id=e.request_id)
            if ref is None:
                rejected.append(_invalid(e.request_id))
                continue
        if ref is None:
            route = None
        elif ref.pool_id in routes:
            route = routes[ref.pool_id]
        else:
            route = routes[ref.pool_id] = pool_route_by_id(ref.pool_id)
        if route is None:
            code, message = (("attribution_unavailable", "Redis is unreachable and the event "
                              "has no reservation_id; report it again later.") if held is None
                             else ("unknown_request", "No reservation for this request_id; "
                                   "send the reservation_id authorize returned."))
            rejected.append(UsageResult(e.request_id, REJECTED, code, message))
            continue
        implausible = usage_implausible(e, route)
        if implausible is not None:  # its reservation is left to expire, as if unreported
            rejected.append(UsageResult(e.request_id, REJECTED, "implausible_usage",
                                        implausible))
            continue
        rows.append(_Row(e, ref, not live, *usage_speed(e, route), epoch_ms(e.started_at)))
    return rows, rejected


# Rollups are upserted in key order so concurrent batches lock hourly rows in the same order
# (no deadlocks); counting only `inserted` rows makes a retried batch count nothing twice.
# The events table is partitioned by month (metering/models.py), so it cannot hold a unique index
# on request_id alone: `claimed` takes each request_id in quotas_usageeventkey first and only
# the events it claimed are inserted. A concurrent batch claiming the same id waits for this
# one's commit, then finds the id taken; ids are claimed in sorted order, so two batches sharing
# ids wait for each other in the same order and never deadlock.
_INSERT_SQL = """
WITH batch AS (
    SELECT * FROM unnest(
        %(request_id)s::varchar[], %(org_id)s::bigint[], %(pool_id)s::bigint[],
        %(api_key_id)s::bigint[], %(status)s::varchar[], %(input_tokens)s::bigint[],
        %(cached_input_tokens)s::bigint[], %(output_tokens)s::bigint[],
        %(started_at)b::timestamptz[],
        %(first_token_at)b::timestamptz[], %(finished_at)b::timestamptz[],
        %(ttft_ms)s::integer[], %(output_tps)s::float8[], %(premium_eligible)s::boolean[],
        %(unreserved)s::boolean[], %(queued_ms)s::integer[]
    ) AS b(request_id, org_id, pool_id, api_key_id, status, input_tokens, cached_input_tokens,
           output_tokens, started_at, first_token_at, finished_at, ttft_ms, output_tps,
           premium_eligible, unreserved, queued_ms)
), claimed AS (
    INSERT INTO quotas_usageeventkey (request_id, interrupted_started_at)
    SELECT request_id, CASE WHEN status = 'interrupted' THEN started_at END
    FROM batch ORDER BY request_id
    ON CONFLICT (request_id) DO NOTHING
    RETURNING request_id
), inserted AS (
    INSERT INTO quotas_usageevent (
        request_id, org_id, pool_id, api_key_id, status, input_tokens, cached_input_tokens,
        output_tokens, started_at, first_token_at, finished_at, ttft_ms, output_tps,
        premium_eligible, unreserved, queued_ms, received_at)
    SELECT request_id, org_id, pool_id, api_key_id, status, input_tokens, cached_input_tokens,
           output_tokens, started_at, first_token_at, finished_at, ttft_ms, output_tps,
           premium_eligible, unreserved, queued_ms, %(received_at)s
    FROM batch JOIN claimed USING (request_id)
    RETURNING request_id, org_id, pool_id, api_key_id, status, input_tokens,
              cached_input_tokens, output_tokens, started_at, first_token_at, finished_at,
              ttft_ms, premium_eligible
), rolled AS (
    INSERT INTO quotas_usagehourly AS h (
        org_id, pool_id, api_key_id, hour, requests, errors, input_tokens, cached_input_tokens,
        output_tokens, premium_input_tokens, premium_output_tokens, ttft_ms_total, ttft_count,
        decode_ms_total, interrupted)
    SELECT org_id, pool_id, api_key_id, date_trunc('hour', started_at, 'UTC'),
           count(*), count(*) FILTER (WHERE status <> 'completed'),
           sum(input_tokens), sum(cached_input_tokens), sum(output_tokens),
           coalesce(sum(input_tokens) FILTER (WHERE premium_eligible), 0),
           coalesce(sum(output_tokens) FILTER (WHERE premium_eligible), 0),
           coalesce(sum(ttft_ms), 0), count(ttft_ms),
           coalesce(sum(round(extract(epoch FROM finished_at - first_token_at) * 1000)), 0),
           count(*) FILTER (WHERE status = 'interrupted')
    FROM inserted
    GROUP BY 1, 2, 3, 4
    ORDER BY 1, 2, 3, 4
    ON CONFLICT (org_id, pool_id, api_key_id, hour) DO UPDATE SET
        requests = h.requests + EXCLUDED.requests,
        errors = h.errors + EXCLUDED.errors,
        input_tokens = h.input_tokens + EXCLUDED.input_tokens,
        cached_input_tokens = h.cached_input_tokens + EXCLUDED.cached_input_tokens,
        output_tokens = h.output_tokens + EXCLUDED.output_tokens,
        premium_input_tokens = h.premium_input_tokens + EXCLUDED.premium_input_tokens,
        premium_output_tokens = h.premium_output_tokens + EXCLUDED.premium_output_tokens,
        ttft_ms_total = h.ttft_ms_total + EXCLUDED.ttft_ms_total,
        ttft_count = h.ttft_count + EXCLUDED.ttft_count,
        decode_ms_total = h.decode_ms_total + EXCLUDED.decode_ms_total,
        interrupted = h.interrupted + EXCLUDED.interrupted
)
SELECT request_id FROM inserted
"""


# The batch's columns travel as array literals (text), except its timestamps, which travel
# binary: psycopg dumps a list element by element in Python (about 0.4 µs each, 16 columns
# of up to 1,000), while str.join builds a literal in C; a tz-aware datetime's str() costs
# more than psycopg's binary dump of it, so those stay binary.

def _literal(values: list) -> str:
    """An array literal of ints, floats or bools (None: NULL). Their str() never holds a
    comma, brace, quote or "None" (repr of a float round-trips: PostgreSQL reads the same
    double back)."""
    return "{" + ",".join(map(str, values)).replace("None", "NULL") + "}"


def _quoted(values: list[str]) -> str:
    """An array literal of strings, every element quoted (so "NULL" stays a string)."""
    if not values:
        return "{}"
    text = "".join(values)
    if '"' in text or "\\" in text:  # request_ids never hold them (REQUEST_ID): be exact
        values = [v.replace("\\", "\\\\").replace('"', '\\"') for v in values]
    return '{"' + '","'.join(values) + '"}'


def _columns(rows: list[_Row]) -> dict[str, object]:
    events = [r.event for r in rows]
    refs = [r.ref for r in rows]
    return {
        "request_id": _quoted([e.request_id for e in events]),
        "org_id": _literal([f.org_id for f in refs]),
        "pool_id": _literal([f.pool_id for f in refs]),
        "api_key_id": _literal([f.api_key_id for f in refs]),
        "status": _quoted([e.status for e in events]),
        "input_tokens": _literal([e.input_tokens for e in events]),
        "cached_input_tokens": _literal([e.cached_input_tokens for e in events]),
        "output_tokens": _literal([e.output_tokens for e in events]),
        "started_at": [e.started_at for e in events],
        "first_token_at": [e.first_token_at for e in events],
        "finished_at": [e.finished_at for e in events],
        "ttft_ms": _literal([r.ttft_ms for r in rows]),
        "output_tps": _literal([r.output_tps for r in rows]),
        "premium_eligible": _literal([r.premium_eligible for r in rows]),
        "unreserved": _literal([r.unreserved for r in rows]),
        "queued_ms": _literal([e.queued_ms for e in events]),
    }


# A real event replaces the interrupted record of its request (docs/hook.md, Leases), and so
# does an interrupted one with more output (a gateway's spool knows more than the sweep's
# checkpoint). Once the batch's insert has skipped its request_id, the record's key is locked
# (a concurrent batch replacing it waits), its event deleted, its rollup taken out and its key
# deleted, in the batch's transaction, and the batch claims the key anew.
_INTERRUPTED_LOCK_SQL = """
SELECT request_id, interrupted_started_at FROM quotas_usageeventkey
WHERE request_id = ANY(%(request_ids)s) AND interrupted_started_at IS NOT NULL
ORDER BY request_id FOR UPDATE
"""
_INTERRUPTED_KEY_DELETE_SQL = "DELETE FROM quotas_usageeventkey WHERE request_id = %(request_id)s"
_INTERRUPTED_EVENT_DELETE_SQL = """
DELETE FROM quotas_usageevent
WHERE org_id = %(org_id)s AND started_at = %(started_at)s AND request_id = %(request_id)s
  AND status = 'interrupted' AND (%(real)s OR output_tokens < %(output_tokens)s)
RETURNING org_id, pool_id, api_key_id, started_at, input_tokens, cached_input_tokens,
          output_tokens, ttft_ms,
          coalesce(round(extract(epoch FROM finished_at - first_token_at) * 1000), 0)::bigint
"""
# Its rollup: the hour's row, or the day's where the hours were summed since (a day row
# holds its hours as of compaction; an event recorded later went to an hourly row beside it).
_INTERRUPTED_ROLLUP_SQL = """
UPDATE quotas_usagehourly SET requests = requests - 1, errors = errors - 1,
    interrupted = interrupted - 1,
    input_tokens = input_tokens - %(input_tokens)s,
    cached_input_tokens = cached_input_tokens - %(cached_input_tokens)s,
    output_tokens = output_tokens - %(output_tokens)s,
    ttft_ms_total = ttft_ms_total - coalesce(%(ttft_ms)s::integer, 0),
    ttft_count = ttft_count - (%(ttft_ms)s::integer IS NOT NULL)::integer,
    decode_ms_total = decode_ms_total - %(decode_ms)s
WHERE org_id = %(org_id)s AND pool_id = %(pool_id)s
  AND api_key_id IS NOT DISTINCT FROM %(api_key_id)s AND hours = %(hours)s AND hour = %(hour)s
  AND interrupted >= 1 AND input_tokens >= %(input_tokens)s AND output_tokens >= %(output_tokens)s
"""


@dataclass(slots=True)
class _Removed:
    """An interrupted event a real one replaced: what its rollup and spend held."""
    org_id: int
    pool_id: int
    api_key_id: int | None
    started_at: datetime
    input_tokens: int
    cached_input_tokens: int
    output_tokens: int
    ttft_ms: int | None  # an interrupted event a gateway reported may have timings
    decode_ms: int


def _interrupted_remove(cursor, rows: list[_Row]) -> list[_Removed]:
    """Take out the interrupted records that `rows` replace."""
    by_id = {r.event.request_id: r for r in rows}
    cursor.execute(_INTERRUPTED_LOCK_SQL, {"request_ids": sorted(by_id)})
    removed = []
    for request_id, started_at in cursor.fetchall():
        new = by_id[request_id]
        cursor.execute(_INTERRUPTED_EVENT_DELETE_SQL, {
            "org_id": new.ref.org_id, "started_at": started_at, "request_id": request_id,
            "real": new.event.status != UsageStatus.INTERRUPTED,
            "output_tokens": new.event.output_tokens})
        for old in map(lambda values: _Removed(*values), cursor.fetchall()):
            cursor.execute(_INTERRUPTED_KEY_DELETE_SQL, {"request_id": request_id})
            removed.append(old)
            hour = old.started_at.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
            for hours, at in ((1, hour), (24, hour.replace(hour=0))):
                cursor.execute(_INTERRUPTED_ROLLUP_SQL, {
                    "org_id": old.org_id, "pool_id": old.pool_id, "api_key_id": old.api_key_id,
                    "hours": hours, "hour": at, "input_tokens": old.input_tokens,
                    "cached_input_tokens": old.cached_input_tokens,
                    "output_tokens": old.output_tokens, "ttft_ms": old.ttft_ms,
                    "decode_ms": old.decode_ms})
                if cursor.rowcount:
                    break
    return removed


def _insert_rows(cursor, rows: list[_Row], received_at: datetime) -> set[str]:
    """One INSERT of `rows`, skipping the request_ids already recorded: those it inserted."""
    cursor.execute(_INSERT_SQL, {**_columns(rows), "received_at": received_at})
    return {request_id for (request_id,) in cursor.fetchall()}


def _insert(cursor, rows: list[_Row], received_at: datetime) -> tuple[set[str], list[_Removed]]:
    """Insert the batch, replacing interrupted records: the request_ids inserted, and the
    interrupted records removed. Interrupted records are looked for only among the request_ids
    the insert skipped (recorded before: by an earlier batch, or the sweep, committed meanwhile
    or not), so a batch of new events costs one statement, and a batch replacing some, four
    more (locked, the event and the key deleted, the rollup taken out) and the insert again."""
    inserted = _insert_rows(cursor, rows, received_at)
    skipped = [r for r in rows if r.event.request_id not in inserted]
    removed = _interrupted_remove(cursor, skipped) if skipped else []
    if removed:  # the replaced records' keys are gone: their events claim them now
        inserted |= _insert_rows(cursor, skipped, received_at)
    return inserted, removed


def _settle(rows: list[_Row]) -> None:
    by_pool: dict[int, list[Settlement]] = defaultdict(list)
    for r in rows:
        e = r.event
        by_pool[r.ref.pool_id].append(Settlement(
            request_id=e.request_id, org_id=r.ref.org_id, input_tokens=e.input_tokens,
            output_tokens=e.output_tokens, cached_input_tokens=e.cached_input_tokens,
            api_key_id=r.ref.api_key_id or 0, completed=int(e.status == "completed"),
            day=day_stamp_of_ms(r.started_ms), finished_ms=epoch_ms(e.finished_at)))
    for pool_id, settlements in by_pool.items():
        try:
            limiter_settle(pool_id=pool_id, settlements=settlements)
        except LimiterUnavailable:
            # The usage is safe in PostgreSQL; the reservations expire and free their slots,
            # and the day counter keeps the full reservation (an over-count, never an under).
            logger.warning("usage: could not settle %d reservations of pool %s",
                           len(settlements), pool_id)


def _usage_cells(rows: list[_Row], removed: list[_Removed] = ()) -> list[UsageCell]:
    """The new rows, less the interrupted records they replaced, summed per org, pool and UTC
    hour: the same cells as the hourly rollups."""
    cells: dict = defaultdict(lambda: [0, 0, 0, 0, 0])
    for old in removed:
        hour = old.started_at.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
        cell = cells[(old.org_id, old.pool_id, hour)]
        cell[0] -= old.input_tokens
        cell[1] -= old.output_tokens
        cell[4] -= old.cached_input_tokens
    for r in rows:
        cell = cells[(r.ref.org_id, r.ref.pool_id, _hour(r.started_ms // _HOUR_MS))]
        cell[0] += r.event.input_tokens
        cell[1] += r.event.output_tokens
        if r.premium_eligible:
            cell[2] += r.event.input_tokens
            cell[3] += r.event.output_tokens
        cell[4] += r.event.cached_input_tokens
    return [UsageCell(org_id, pool_id, hour, *sums)
            for (org_id, pool_id, hour), sums in cells.items()]


def _after_commit(rows: list[_Row], removed: list[_Removed], settle: list[_Row]) -> None:
    # Billing prices the new usage into the orgs' month spend counters (spend caps) before the
    # settlement frees the money the reservations held: in between the money counts twice
    # (more refusals for a moment), never zero times (a spend cap passed).
    try:
        usage_recorded.emit(cells=_usage_cells(rows, removed))
    finally:
        _settle(settle)


# key id -> when this process last touched it: saves a query per call for busy keys.
_touched: dict[int, datetime] = {}


def _keys_touch(key_ids: set[int], now: datetime) -> None:
    stale = sorted(k for k in key_ids
                   if k not in _touched or now - _touched[k] >= LAST_USED_RESOLUTION)
    if stale:
        api_key_touch(key_ids=stale, at=now)
        _touched.update(dict.fromkeys(stale, now))


@transaction.atomic(durable=True)
def _store(rows: list[_Row], *, settle_all: bool = False) -> set[str]:
    """Record `rows`; after the commit, settle in Redis those inserted (`settle_all`: every
    row, the sweep's: a lease claimed again after a sweep died may be recorded already, and is
    not settled yet)."""
    now = clock.now()
    connection.ensure_connection()
    # A server-side-binding cursor on Django's connection (same transaction): the arrays travel
    # as parameters (see `_columns`) instead of being quoted into the SQL text client-side,
    # which for 1,000 events was most of the Python time of the call.
    conn = connection.connection
    # Prepared once per connection (this statement only: Django keeps prepared statements off
    # for everything else), which spares PostgreSQL parsing and planning it every batch.
    threshold, conn.prepare_threshold = conn.prepare_threshold, 0
    try:
        with psycopg.Cursor(conn) as cursor:
            inserted, removed = _insert(cursor, rows, now)
    finally:
        conn.prepare_threshold = threshold
    fresh = [r for r in rows if r.event.request_id in inserted]
    _keys_touch({r.ref.api_key_id for r in fresh if r.ref.api_key_id is not None}, now)
    transaction.on_commit(lambda: _after_commit(fresh, removed, rows if settle_all else fresh))
    return inserted


# The window of a usage event's timestamps (docs/hook.md, "Accepted timestamps"):
# started_at <= first_token_at <= finished_at; nothing later than the clock plus FUTURE_SKEW
# (the gateway's clock may run a little ahead of ours); a request lasting at most
# LONGEST_REQUEST; and started_at no older than the raw retention (nor than the oldest
# partition). Outside it an event is rejected on its own: a future one would count against a
# later day's quota, and extreme ones overflow (ttft_ms is a 32-bit integer; year 9999 with a
# negative offset is past what Python's datetime can convert to UTC).
FUTURE_SKEW = timedelta(minutes=5)
LONGEST_REQUEST = timedelta(hours=24)


def _rejected(e: UsageInput, code: str, message: str) -> UsageResult:
    return UsageResult(e.request_id, REJECTED, code, message)


def _timely(events: list[UsageInput]) -> tuple[list[UsageInput], list[UsageResult]]:
    """The events whose timestamps fall in the window; the others are rejected one by one.
    Comparisons of aware datetimes never overflow, whatever their offsets."""
    now = clock.now()
    earliest, newest = usage_started_at_window(now=now)
    latest = min(newest - timedelta(microseconds=1), now + FUTURE_SKEW)  # newest: exclusive
    kept, rejected = [], []
    for e in events:
        first = e.first_token_at or e.started_at
        if not e.started_at <= first <= e.finished_at:
            rejected.append(_rejected(e, "timestamps_out_of_order", "Need started_at <= "
                                      "first_token_at <= finished_at."))
        elif not earliest <= e.started_at <= latest:
            rejected.append(_rejected(
                e, "started_at_out_of_range",
                f"started_at must be from {earliest:%Y-%m-%d %H:%M} to "
                f"{latest:%Y-%m-%d %H:%M:%S} UTC: usage is kept "
                f"{settings.USAGE_RAW_RETENTION_DAYS} days, and may be at most "
                f"{FUTURE_SKEW.seconds // 60} minutes ahead of the server's clock."))
        elif e.finished_at > now + FUTURE_SKEW:
            rejected.append(_rejected(
                e, "finished_at_out_of_range", f"finished_at may be at most "
                f"{FUTURE_SKEW.seconds // 60} minutes ahead of the server's clock."))
        elif e.finished_at - e.started_at > LONGEST_REQUEST:
            rejected.append(_rejected(
                e, "duration_out_of_range", f"A request lasts at most "
                f"{LONGEST_REQUEST.total_seconds() / 3600:g} hours from started_at to "
                "finished_at."))
        else:
            kept.append(e)
    return kept, rejected


def usage_record(*, events: list[UsageInput]) -> list[UsageResult]:
    """Record a batch of usage events; one result per event, in order."""
    first: dict[str, UsageInput] = {}
    for e in events:
        first.setdefault(e.request_id, e)
    candidates, outside = _timely(list(first.values()))
    rows, rejected = _attribute(candidates)
    rejected += outside
    inserted = _store(rows) if rows else set()
    outcome = {r.request_id: r for r in rejected}
    results, seen = [], set()
    for e in events:
        if e.request_id in outcome:
            results.append(outcome[e.request_id])
        elif e.request_id in inserted and e.request_id not in seen:
            results.append(UsageResult(e.request_id, RECORDED))
        else:
            results.append(UsageResult(e.request_id, DUPLICATE))
        seen.add(e.request_id)
    return results


def usage_record_attributed(*, events: list[UsageInput], refs: dict[str, ReservationRef]
                            ) -> tuple[set[str], list[UsageResult]]:
    """Record events Sluice attributed itself (`refs`: request_id -> its reservation; the
    sweep's interrupted leases), never premium-eligible, then settle every one of them in
    Redis, recorded now or before. (The request_ids inserted, the events rejected.)"""
    kept, rejected = _timely(events)
    rows = [_Row(e, refs[e.request_id], False, None, None, False, epoch_ms(e.started_at))
            for e in kept]
    return (_store(rows, settle_all=True) if rows else set()), rejected
