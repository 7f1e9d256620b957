"""Keeping usage for years without keeping every event: raw events go after
SLUICE_USAGE_RAW_RETENTION_DAYS, hourly rollups become daily after
SLUICE_USAGE_HOURLY_RETENTION_DAYS. Beat runs both daily (metering/tasks.py).

Raw events. A month's partition goes when its last day is older than the retention, the month is
invoiced for every org with usage in it (billing says, through `usage_month_retiring`), and the
rollups hold exactly what its events add up to. Whole partitions are detached - CONCURRENTLY, so
ingestion into other months never waits - then compared with the rollups, which nothing can
change for that month any more (ingestion refuses start times past the retention,
metering/partitions.py), and dropped only if every figure of every org, pool, key and UTC day
agrees; its events' request ids leave the key table just before (metering/models.py,
`UsageEventKey`). A partition that differs stays detached, out of every reader's way, for an
operator (logged as an error; each run compares it again). Never a DELETE of events: that would
leave the table as large as it was and vacuum the difference.

Rollups. Each UTC day older than the hourly retention becomes one row per org, pool and key
(`hours` = 24, in the same table: metering/models.py), in one statement, so a reader sees the
day's hours or its sum, never both or neither. A pool whose prices change during the day (billing
says, through `usage_days_compacting`) keeps that day's hours, so rating - the version in force
at each row's hour - gives the same cents before and after.
"""

import logging
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

from django.conf import settings
from django.db import connection

from metering.events import usage_days_compacting, usage_month_retiring
from metering.models import UsageHourly
from metering.partitions import (
    Partition,
    usage_partition_detach,
    usage_partition_detach_finish,
    usage_partition_drop,
    usage_partitions,
    usage_partitions_detached,
    usage_raw_horizon,
    usage_started_at_window_forget,
)

logger = logging.getLogger(__name__)
DAY = timedelta(days=1)
_KEYS_PER_BATCH = 10_000


@dataclass
class RawRetirement:
    dropped: list[str] = field(default_factory=list)
    unbilled: dict[str, list[int]] = field(default_factory=dict)  # partition -> org ids
    differing: dict[str, int] = field(default_factory=dict)  # partition -> cells that differ
    keys_forgotten: int = 0


# The figures of each org, pool, key and UTC day, summed from the events exactly as ingestion
# sums them into the rollups (metering/usage.py), beside the same figures summed from the rollups
# (hourly and daily rows alike); a cell that differs, or exists on one side only, is counted.
_DIFFERENCES_SQL = """
WITH events AS (
    SELECT org_id, pool_id, coalesce(api_key_id, 0) AS key,
           date_trunc('day', started_at, 'UTC') AS day,
           count(*) AS requests, count(*) FILTER (WHERE status <> 'completed') AS errors,
           sum(input_tokens) AS input_tokens, sum(cached_input_tokens) AS cached_input_tokens,
           sum(output_tokens) AS output_tokens,
           coalesce(sum(input_tokens) FILTER (WHERE premium_eligible), 0) AS premium_input,
           coalesce(sum(output_tokens) FILTER (WHERE premium_eligible), 0) AS premium_output,
           coalesce(sum(ttft_ms), 0) AS ttft_ms_total, count(ttft_ms) AS ttft_count,
           coalesce(sum(round(extract(epoch FROM finished_at - first_token_at) * 1000)), 0)
               AS decode_ms_total
    FROM {table} GROUP BY 1, 2, 3, 4
), rollups AS (
    SELECT org_id, pool_id, coalesce(api_key_id, 0) AS key,
           date_trunc('day', hour, 'UTC') AS day,
           sum(requests) AS requests, sum(errors) AS errors, sum(input_tokens) AS input_tokens,
           sum(cached_input_tokens) AS cached_input_tokens, sum(output_tokens) AS output_tokens,
           sum(premium_input_tokens) AS premium_input,
           sum(premium_output_tokens) AS premium_output, sum(ttft_ms_total) AS ttft_ms_total,
           sum(ttft_count) AS ttft_count, sum(decode_ms_total) AS decode_ms_total
    FROM quotas_usagehourly WHERE hour >= %(start)s AND hour < %(end)s GROUP BY 1, 2, 3, 4
)
SELECT count(*) FROM events e FULL JOIN rollups r
    ON e.org_id = r.org_id AND e.pool_id = r.pool_id AND e.key = r.key AND e.day = r.day
WHERE (e.requests, e.errors, e.input_tokens, e.cached_input_tokens, e.output_tokens,
       e.premium_input, e.premium_output, e.ttft_ms_total, e.ttft_count, e.decode_ms_total)
      IS DISTINCT FROM
      (r.requests, r.errors, r.input_tokens, r.cached_input_tokens, r.output_tokens,
       r.premium_input, r.premium_output, r.ttft_ms_total, r.ttft_count, r.decode_ms_total)
"""


def usage_partition_differences(partition: Partition) -> int:
    """How many (org, pool, key, UTC day) cells of the partition's month differ between its
    events and the rollups (0: the rollups hold exactly what the events add up to)."""
    with connection.cursor() as cursor:
        # The table name comes from Partition (a fixed pattern), never from input.
        cursor.execute(_DIFFERENCES_SQL.format(table=partition.name),  # noqa: S608
                       {"start": partition.start, "end": partition.end})
        return cursor.fetchone()[0]


def _orgs_with_usage(partition: Partition) -> set[int]:
    return set(UsageHourly.objects.filter(hour__gte=partition.start, hour__lt=partition.end)
               .values_list("org_id", flat=True).distinct().order_by())


# The next batch of a detached partition's events, in id order (its primary key), and their
# request ids deleted from the key table: exactly the keys of the events about to be dropped.
_KEYS_FORGET_SQL = """
WITH batch AS (
    SELECT id, request_id FROM {table} WHERE id > %(after)s ORDER BY id LIMIT %(size)s
), forgotten AS (
    DELETE FROM quotas_usageeventkey k USING batch b WHERE k.request_id = b.request_id
    RETURNING 1
)
SELECT (SELECT max(id) FROM batch), (SELECT count(*) FROM forgotten)
"""


def _keys_forget(partition: Partition) -> int:
    """Delete the request ids of a detached partition's events, a batch per short transaction
    beside ingestion's. Run again after an interruption, it finds only what is left."""
    forgotten, after = 0, 0
    with connection.cursor() as cursor:
        while True:
            # The table name comes from Partition (a fixed pattern), never from input.
            cursor.execute(_KEYS_FORGET_SQL.format(table=partition.name),  # noqa: S608
                           {"after": after, "size": _KEYS_PER_BATCH})
            last, deleted = cursor.fetchone()
            if last is None:
                return forgotten
            forgotten, after = forgotten + deleted, last


def usage_raw_retire(*, now: datetime) -> RawRetirement:
    """Beat, daily: drop the months of raw events past the retention (the module docstring
    says when). Runs outside any transaction: DETACH ... CONCURRENTLY cannot run in one."""
    horizon = usage_raw_horizon(now)
    result = RawRetirement()
    usage_partition_detach_finish()
    for partition in usage_partitions():
        if partition.end > horizon:
            break
        unbilled: set[int] = set()
        usage_month_retiring.emit(month=partition.month, org_ids=_orgs_with_usage(partition),
                                  unbilled=unbilled)
        if unbilled:
            logger.warning("usage: keeping %s: not invoiced yet for orgs %s", partition.name,
                           sorted(unbilled))
            result.unbilled[partition.name] = sorted(unbilled)
            continue
        usage_partition_detach(partition)
    for partition in usage_partitions_detached():
        if partition.end > horizon:
            continue  # not retention's: never drop it
        differences = usage_partition_differences(partition)
        if differences:
            logger.error("usage: %s is detached but kept: its events and the rollups differ in "
                         "%d (org, pool, key, day) cells", partition.name, differences)
            result.differing[partition.name] = differences
            continue
        result.keys_forgotten += _keys_forget(partition)
        usage_partition_drop(partition)
        result.dropped.append(partition.name)
    usage_started_at_window_forget()
    return result


@dataclass
class RollupCompaction:
    days: int = 0
    day_rows: int = 0  # written or added to
    kept_hourly: list[tuple[int, date]] = field(default_factory=list)  # (pool id, day)


_COUNTER_SUMS = ", ".join(f"sum({c})" for c in UsageHourly.COUNTERS)
_COUNTER_ADDS = ", ".join(f"{c} = d.{c} + EXCLUDED.{c}" for c in UsageHourly.COUNTERS)
_COUNTERS = ", ".join(UsageHourly.COUNTERS)
# One statement: the day's hourly rows are deleted and their sums inserted (or added to the
# day's row, when late usage left hours beside it) atomically. The 00:00 row deleted here does
# not conflict with the day row inserted at the same hour: PostgreSQL sees it as gone.
_COMPACT_SQL = f"""
WITH hours AS (
    DELETE FROM quotas_usagehourly
    WHERE hours = 1 AND hour >= %(day)s AND hour < %(next_day)s
      AND NOT (pool_id = ANY(%(kept_pools)s))
    RETURNING org_id, pool_id, api_key_id, {_COUNTERS}
)
INSERT INTO quotas_usagehourly AS d (org_id, pool_id, api_key_id, hour, hours, {_COUNTERS})
SELECT org_id, pool_id, api_key_id, %(day)s, 24, {_COUNTER_SUMS}
FROM hours GROUP BY org_id, pool_id, api_key_id ORDER BY org_id, pool_id, api_key_id
ON CONFLICT (org_id, pool_id, api_key_id, hour) DO UPDATE SET {_COUNTER_ADDS}
"""  # noqa: S608 - the columns are the model's constants


def _oldest_hourly_day(*, before: datetime, since: datetime | None = None) -> datetime | None:
    """The UTC midnight of the oldest hourly row in [since, before) (partial index on the
    rows not compacted yet)."""
    rows = UsageHourly.objects.filter(hours=1, hour__lt=before)
    if since is not None:
        rows = rows.filter(hour__gte=since)
    oldest = rows.order_by("hour").values_list("hour", flat=True).first()
    return None if oldest is None else oldest.astimezone(UTC).replace(hour=0)


def usage_rollups_compact(*, now: datetime, max_days: int = 366) -> RollupCompaction:
    """Beat, daily: compact every day older than the hourly retention, oldest first, at most
    `max_days` a run (a first run over years of history finishes over the next runs)."""
    before = (now - timedelta(days=settings.USAGE_HOURLY_RETENTION_DAYS)).astimezone(UTC)
    before = before.replace(hour=0, minute=0, second=0, microsecond=0)
    result = RollupCompaction()
    day = _oldest_hourly_day(before=before)
    if day is None:
        return result
    split_hours: set[tuple[int, datetime]] = set()
    usage_days_compacting.emit(start=day, end=before, split_hours=split_hours)
    while day is not None and result.days < max_days:
        kept = sorted({pool for pool, hour in split_hours if day < hour < day + DAY})
        with connection.cursor() as cursor:
            cursor.execute(_COMPACT_SQL, {"day": day, "next_day": day + DAY, "kept_pools": kept})
            result.day_rows += cursor.rowcount
        result.days += 1
        result.kept_hourly += [(pool, day.date()) for pool in kept]
        day = _oldest_hourly_day(before=before, since=day + DAY)
    return result
