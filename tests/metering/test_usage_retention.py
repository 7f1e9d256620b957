"""Raw usage events past the retention: whole monthly partitions detached and dropped once the
month is invoiced and the rollups hold exactly what its events add up to; never a DELETE; and
ingestion into this month carries on meanwhile, losing nothing and counting nothing twice."""

import os
import re
import subprocess
import sys
import threading
from datetime import date, timedelta

import pytest
from django.db import connection
from django.db.models import F, Sum
from django.db.utils import OperationalError
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from billing.models import Invoice, InvoiceStatus
from metering.models import UsageEvent, UsageEventKey, UsageHourly
from metering.partitions import (
    partition_for,
    usage_partitions,
    usage_partitions_detached,
    usage_started_at_window_forget,
)
from metering.retention import usage_partition_differences, usage_raw_retire
from metering.usage import usage_record
from sluice.months import month_after
from tests.conftest import usage_partitions_for_tests
from tests.metering.usage_events import month_start, routed_tenant, usage_event

pytestmark = pytest.mark.django_db(transaction=True)

# A month well inside the tests' partitions, and a "now" 91 days after its end: that month is
# past the 90-day retention, the next one is not.
OLD = month_start(timezone.now(), months=-8)
NEXT = month_start(OLD, months=1)
NOW = NEXT + timedelta(days=91)


@pytest.fixture(autouse=True)
def _partitions_restored():
    """Retention drops every month past the horizon, the empty ones too: give the other tests
    theirs back, and drop what a test left detached."""
    yield
    for partition in usage_partitions_detached():
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TABLE {partition.name}")
    usage_partitions_for_tests()
    usage_started_at_window_forget()


@pytest.fixture
def tenant(limiter):
    return routed_tenant()


def _record_old_month(tenant, clock) -> list[str]:
    """Events on the last second of OLD, inside it and in the first second of NEXT."""
    clock.freeze(NEXT + timedelta(hours=1))  # every start in the past, as reported usage is
    starts = {"old-1": OLD + timedelta(days=3, hours=5), "old-2": OLD + timedelta(days=3),
              "old-last": NEXT - timedelta(seconds=1), "next-first": NEXT}
    results = usage_record(events=[usage_event(tenant, request_id, at, output_tokens=n * 10)
                                   for n, (request_id, at) in enumerate(starts.items(), 1)])
    assert {r.result for r in results} == {"recorded"}
    clock.freeze(NOW)
    return list(starts)


def _invoice(org, month: date) -> Invoice:
    return Invoice.objects.create(
        org=org, period_start=month, period_end=month_after(month), total_cents=0,
        number=f"SL-{org.pk:05d}-{month:%Y%m}-1", status=InvoiceStatus.PAID)


def _table_exists(name: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s)", [name])
        return cursor.fetchone()[0] is not None


def test_a_month_past_retention_goes_whole_once_invoiced(tenant, limiter_clock):
    _record_old_month(tenant, limiter_clock)
    old = partition_for(OLD.date())
    rollups = UsageHourly.objects.aggregate(requests=Sum("requests"), tokens=Sum("output_tokens"))

    kept = usage_raw_retire(now=NOW)
    assert kept.unbilled == {old.name: [tenant.org.pk]} and old.name not in kept.dropped
    assert old in usage_partitions() and UsageEvent.objects.count() == 4

    _invoice(tenant.org, OLD.date())
    with CaptureQueriesContext(connection) as queries:
        result = usage_raw_retire(now=NOW)
    assert old.name in result.dropped and result.differing == {} and result.unbilled == {}
    assert not _table_exists(old.name) and old not in usage_partitions_detached()
    assert partition_for(NEXT.date()) in usage_partitions()
    # The month went by DETACH and DROP, never a DELETE of events.
    sql = [q["sql"] for q in queries.captured_queries]
    assert any(f"DETACH PARTITION {old.name} CONCURRENTLY" in s for s in sql)
    assert not any(re.search(r"DELETE FROM quotas_usageevent\b", s) for s in sql)
    # Its events and their request ids are gone; the next month's stay; the rollups (what
    # invoices rate) are untouched.
    assert list(UsageEvent.objects.values_list("request_id", flat=True)) == ["next-first"]
    assert list(UsageEventKey.objects.values_list("request_id", flat=True)) == ["next-first"]
    assert result.keys_forgotten == 3
    assert UsageHourly.objects.aggregate(
        requests=Sum("requests"), tokens=Sum("output_tokens")) == rollups
    # A late report of the dropped month is refused, not recorded a second time.
    late = usage_record(events=[usage_event(tenant, "old-1", OLD + timedelta(days=3))])
    assert (late[0].result, late[0].error_code) == ("rejected", "started_at_out_of_range")


def test_a_month_whose_rollups_differ_is_detached_but_kept(tenant, limiter_clock):
    _record_old_month(tenant, limiter_clock)
    _invoice(tenant.org, OLD.date())
    old = partition_for(OLD.date())
    hour = (OLD + timedelta(days=3, hours=5)).replace(minute=0)
    UsageHourly.objects.filter(hour=hour).update(requests=F("requests") + 1)

    result = usage_raw_retire(now=NOW)
    assert result.differing == {old.name: 1} and old.name not in result.dropped
    assert old in usage_partitions_detached() and old not in usage_partitions()
    assert UsageEvent.objects.count() == 1  # out of every reader's way
    assert UsageEventKey.objects.count() == 4  # its request ids stay with it

    UsageHourly.objects.filter(hour=hour).update(requests=F("requests") - 1)
    assert usage_partition_differences(old) == 0
    assert old.name in usage_raw_retire(now=NOW).dropped
    assert not _table_exists(old.name) and UsageEventKey.objects.count() == 1


def test_an_interrupted_detach_is_finished_then_dropped():
    old = partition_for(OLD.date())
    holder = connection.copy()
    try:
        holder.set_autocommit(False)
        with holder.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM quotas_usageevent")  # holds the partition
        with connection.cursor() as cursor:
            # DETACH CONCURRENTLY commits its first step, then waits for the reader; cancelled
            # there, it leaves the partition "detach pending".
            cursor.execute("SET statement_timeout = '200ms'")
            with pytest.raises(OperationalError):
                cursor.execute(f"ALTER TABLE quotas_usageevent DETACH PARTITION {old.name} "
                               "CONCURRENTLY")
            cursor.execute("SET statement_timeout = 0")
    finally:
        holder.rollback()
        holder.close()
    with connection.cursor() as cursor:
        cursor.execute("SELECT inhdetachpending FROM pg_inherits WHERE inhrelid = %s::regclass",
                       [old.name])
        assert cursor.fetchone() == (True,)
    assert old.name in usage_raw_retire(now=NOW).dropped
    assert not _table_exists(old.name)


def test_retention_during_ingestion_loses_nothing_and_counts_nothing_twice(
        tenant, limiter_clock):
    _record_old_month(tenant, limiter_clock)
    _invoice(tenant.org, OLD.date())
    recorded: list[str] = []
    errors: list[Exception] = []
    enough = threading.Event()
    retired = threading.Event()

    def ingest() -> None:
        batch = 0
        try:
            # Into this month, before, while and after retention detaches the old one.
            while not retired.is_set() or batch < 10:
                events = [usage_event(tenant, f"live-{batch}-{i}", NOW - timedelta(seconds=i))
                          for i in range(20)]
                recorded.extend(r.request_id for r in usage_record(events=events)
                                if r.result == "recorded")
                batch += 1
                if batch == 5:
                    enough.set()
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)
            enough.set()
        finally:
            connection.close()

    thread = threading.Thread(target=ingest)
    thread.start()
    enough.wait()
    try:
        result = usage_raw_retire(now=NOW)
    finally:
        retired.set()
        thread.join()
    assert errors == []
    assert partition_for(OLD.date()).name in result.dropped
    stored = list(UsageEvent.objects.values_list("request_id", flat=True))
    assert sorted(stored) == sorted([*recorded, "next-first"])  # nothing lost
    assert len(set(stored)) == len(stored)  # nothing twice
    assert set(UsageEventKey.objects.values_list("request_id", flat=True)) == set(stored)
    this_month = partition_for(NOW.date())
    assert UsageHourly.objects.filter(hour__gte=this_month.start - timedelta(hours=1)).aggregate(
        n=Sum("requests"))["n"] == len(recorded)
    assert usage_partition_differences(this_month) == 0
    again = usage_record(events=[usage_event(tenant, f"live-0-{i}", NOW) for i in range(20)])
    assert {r.result for r in again} == {"duplicate"}


@pytest.mark.django_db(transaction=False)
@pytest.mark.parametrize(("name", "value", "message"), [
    ("SLUICE_USAGE_RAW_RETENTION_DAYS", "ninety", "is not an integer"),
    ("SLUICE_USAGE_RAW_RETENTION_DAYS", "30", "must be at least 31"),
    ("SLUICE_USAGE_HOURLY_RETENTION_DAYS", "34", "must be at least 35"),
])
def test_retention_settings_are_parsed_strictly(name, value, message):
    env = {**os.environ, name: value, "DJANGO_SETTINGS_MODULE": "config.settings.test"}
    result = subprocess.run([sys.executable, "-c", "import django; django.setup()"], env=env,
                            capture_output=True, text=True, check=False)
    assert result.returncode != 0 and message in result.stderr
