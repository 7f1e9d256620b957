"""The monthly partitions of `quotas_usageevent` (created by quotas migration 0006; the table keeps
the name it had there).

A partition holds the events that started in one UTC month and is named after it:
quotas_usageevent_y2026m11 holds [2026-11-01, 2026-12-01). Every `migrate` (post_migrate) and
beat each day make sure the months around this one exist: the `PARTITIONS_BEHIND` before it
that the raw retention still covers (all of them at the default 90 days), and
`PARTITIONS_AHEAD` after it. Behind, because a gateway may report a request that started last
month (at 00:05 on the 1st, or replaying a spool) to an installation made today; no further,
so that a retention of years does not make an empty partition for each of its months at the
first migrate (every query that cannot prune would lock them all). Retention drops only months
that ended before its horizon (metering/retention.py), so the two never undo each other.

An event whose month has no partition would fail its whole batch, so ingestion only accepts
start times inside `usage_started_at_window`: from the later of the retention horizon and the
oldest partition, to the end of the newest. The bounds are read from the catalog once a minute
per process; partitions are made months ahead and dropped months after anyone reports into
them, so a minute-old view is always a safe one.
"""

import re
import time
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from django.conf import settings
from django.db import connection, transaction

from sluice.months import month_after, month_before, month_of

PARENT = "quotas_usageevent"
PARTITIONS_AHEAD = 3
PARTITIONS_BEHIND = 3
_NAME = re.compile(r"^quotas_usageevent_y(\d{4})m(\d{2})$")
# Creating a partition takes a SHARE UPDATE EXCLUSIVE lock on the parent (ATTACH, unlike
# CREATE TABLE ... PARTITION OF), which ingestion's inserts do not conflict with; the timeout
# only bounds a wait behind a long-running DDL.
_LOCK_TIMEOUT = "5s"
_WINDOW_TTL_SECONDS = 60


@dataclass(frozen=True, order=True)
class Partition:
    month: date
    name: str

    @property
    def start(self) -> datetime:
        return datetime(self.month.year, self.month.month, 1, tzinfo=UTC)

    @property
    def end(self) -> datetime:
        following = month_after(self.month)
        return datetime(following.year, following.month, 1, tzinfo=UTC)


def partition_for(month: date) -> Partition:
    return Partition(month=month, name=f"{PARENT}_y{month:%Y}m{month:%m}")


def _partition_named(name: str) -> Partition | None:
    match = _NAME.match(name)
    return None if match is None else partition_for(date(int(match[1]), int(match[2]), 1))


def usage_events_partitioned() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT relkind FROM pg_class WHERE relname = %s "
                       "AND relnamespace = current_schema()::regnamespace", [PARENT])
        row = cursor.fetchone()
    return row is not None and row[0] == "p"


def usage_partitions() -> list[Partition]:
    """The partitions attached to the parent (not those being detached), oldest first."""
    with connection.cursor() as cursor:
        cursor.execute("""
            SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
            WHERE i.inhparent = %s::regclass AND NOT i.inhdetachpending""", [PARENT])
        found = (_partition_named(name) for (name,) in cursor.fetchall())
    return sorted(p for p in found if p is not None)


def usage_partitions_detached() -> list[Partition]:
    """Monthly tables of usage events no longer attached to the parent: retention detached
    them, to be compared with the rollups and dropped (metering/retention.py)."""
    with connection.cursor() as cursor:
        cursor.execute("""
            SELECT c.relname FROM pg_class c
            WHERE c.relkind = 'r' AND c.relname LIKE %s
              AND c.relnamespace = current_schema()::regnamespace
              AND NOT EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = c.oid)""",
                       [f"{PARENT}\\_y%"])
        found = (_partition_named(name) for (name,) in cursor.fetchall())
    return sorted(p for p in found if p is not None)


def usage_partitions_ensure(*, now: datetime, months_ahead: int = PARTITIONS_AHEAD,
                            since: date | None = None) -> list[str]:
    """Make sure a partition exists for every month from `since` (default: `PARTITIONS_BEHIND`
    before `now`'s, and none that ended before the raw retention's horizon) through
    `months_ahead` after `now`'s; returns the names created. Idempotent: beat runs it daily,
    every migrate runs it too. A month that ended before the horizon is only made when asked
    for with `since`: retention dropped it on purpose."""
    this_month = month_of(now)
    if since is None:
        since = this_month
        for _ in range(PARTITIONS_BEHIND):
            since = month_before(since)
        since = max(since, month_of(usage_raw_horizon(now)))
    month, last = since, this_month
    for _ in range(months_ahead):
        last = month_after(last)
    existing = {p.month for p in usage_partitions()}
    created = []
    while month <= last:
        if month not in existing:
            _partition_create(partition_for(month))
            created.append(partition_for(month).name)
        month = month_after(month)
    if created:
        usage_started_at_window_forget()
    return created


@transaction.atomic(durable=True)
def _partition_create(partition: Partition) -> None:
    # A table LIKE the parent, then ATTACH: the attach builds its indexes and foreign keys
    # (cheap on an empty table) and never blocks ingestion, which CREATE ... PARTITION OF
    # would for as long as it waits for its ACCESS EXCLUSIVE lock.
    with connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL lock_timeout = '{_LOCK_TIMEOUT}'")
        cursor.execute(f"CREATE TABLE IF NOT EXISTS {partition.name} "
                       f"(LIKE {PARENT} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)")
        cursor.execute(f"ALTER TABLE {PARENT} ATTACH PARTITION {partition.name} "
                       "FOR VALUES FROM (%s) TO (%s)", [partition.start, partition.end])


def usage_partition_detach(partition: Partition) -> None:
    """Detach CONCURRENTLY: a SHARE UPDATE EXCLUSIVE lock on the parent, so ingestion keeps
    inserting into the other months; it waits for the queries still using the partition. It
    cannot run in a transaction, so neither can its caller."""
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {PARENT} DETACH PARTITION {partition.name} CONCURRENTLY")


def usage_partition_detach_finish() -> list[str]:
    """Finish a detach that was interrupted (the partition left "detach pending", which holds
    up every other detach of the parent). Returns the partitions finished."""
    with connection.cursor() as cursor:
        cursor.execute("""
            SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
            WHERE i.inhparent = %s::regclass AND i.inhdetachpending""", [PARENT])
        pending = [name for (name,) in cursor.fetchall()]
        for name in pending:
            cursor.execute(f"ALTER TABLE {PARENT} DETACH PARTITION {name} FINALIZE")
    return pending


def usage_partition_drop(partition: Partition) -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE {partition.name}")


_window: tuple[float, datetime | None, datetime | None] = (0.0, None, None)


def usage_started_at_window_forget() -> None:
    global _window
    _window = (0.0, None, None)


def usage_started_at_window(*, now: datetime) -> tuple[datetime, datetime]:
    """[earliest, latest) start time an event may have to be recorded: its month has a
    partition, and it is younger than the raw retention (whose months are dropped). An empty
    window when there is no partition at all."""
    global _window
    read_at, oldest, newest = _window
    if time.monotonic() - read_at > _WINDOW_TTL_SECONDS:
        partitions = usage_partitions()
        oldest = partitions[0].start if partitions else now
        newest = partitions[-1].end if partitions else now
        _window = (time.monotonic(), oldest, newest)
    return max(oldest, usage_raw_horizon(now)), newest


def usage_raw_horizon(now: datetime) -> datetime:
    """Raw usage events that started before this instant are past the retention."""
    return now - timedelta(days=settings.USAGE_RAW_RETENTION_DAYS)
