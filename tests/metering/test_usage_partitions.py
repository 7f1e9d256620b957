"""Usage events partitioned by month: where rows go, one row per request_id whatever month its
reports name, partitions made ahead, and the events of before partitioning moved in."""

import random
import threading
from datetime import UTC, date, datetime, timedelta

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from metering.models import UsageEvent, UsageEventKey, UsageHourly
from metering.partitions import (
    PARTITIONS_AHEAD,
    partition_for,
    usage_events_partitioned,
    usage_partitions,
    usage_partitions_ensure,
    usage_started_at_window_forget,
)
from metering.usage import usage_record
from quotas.hook.gateway_tokens import gateway_token_cache_clear, gateway_token_create
from sluice.months import month_after
from tests.conftest import usage_partitions_for_tests
from tests.hook import HookClient
from tests.metering.usage_events import month_start, routed_tenant, usage_event

PARTITIONING = ("quotas", "0006_usage_partitions")
SECOND = timedelta(seconds=1)


@pytest.fixture(autouse=True)
def _window_forgotten():
    """Partitions made or dropped by a test (rolled back, or restored) must not linger in this
    process's view of which months have one."""
    usage_started_at_window_forget()
    yield
    usage_started_at_window_forget()


@pytest.fixture
def tenant(limiter):
    return routed_tenant()


@pytest.fixture
def boundary(limiter_clock):
    """The first instant of this month, with the clock an hour after it."""
    start = month_start(timezone.now())
    limiter_clock.freeze(start + timedelta(hours=1))
    return start


def _partition_of(request_id: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT tableoid::regclass::text FROM quotas_usageevent "
                       "WHERE request_id = %s", [request_id])
        return [name for (name,) in cursor.fetchall()]


def _results(events) -> list[str]:
    return [r.result for r in usage_record(events=events)]


@pytest.mark.django_db
def test_migrate_made_this_month_and_the_months_ahead():
    month = timezone.now().date().replace(day=1)
    expected = [month]
    for _ in range(PARTITIONS_AHEAD):
        expected.append(month_after(expected[-1]))
    assert set(expected) <= {p.month for p in usage_partitions()}


@pytest.mark.django_db
def test_partitions_cover_the_retention_and_the_months_ahead_once():
    far = datetime(2040, 5, 17, tzinfo=UTC)  # the 90-day horizon: 2040-02-17
    created = usage_partitions_ensure(now=far, months_ahead=2)
    assert created == ["quotas_usageevent_y2040m02", "quotas_usageevent_y2040m03",
                       "quotas_usageevent_y2040m04", "quotas_usageevent_y2040m05",
                       "quotas_usageevent_y2040m06", "quotas_usageevent_y2040m07"]
    assert usage_partitions_ensure(now=far, months_ahead=2) == []
    # January ended before the horizon: retention's to drop, never made again.
    assert partition_for(date(2040, 1, 1)) not in usage_partitions()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_get_expr(relpartbound, oid) FROM pg_class WHERE relname = %s",
                       ["quotas_usageevent_y2040m06"])
        assert cursor.fetchone()[0] == ("FOR VALUES FROM ('2040-06-01 00:00:00+00') "
                                        "TO ('2040-07-01 00:00:00+00')")


@pytest.mark.django_db
def test_a_long_retention_makes_only_three_months_behind(settings):
    """Ten years of retention: not 120 empty partitions at the first migrate."""
    settings.USAGE_RAW_RETENTION_DAYS = 3650
    created = usage_partitions_ensure(now=datetime(2041, 5, 17, tzinfo=UTC), months_ahead=0)
    assert created == ["quotas_usageevent_y2041m02", "quotas_usageevent_y2041m03",
                       "quotas_usageevent_y2041m04", "quotas_usageevent_y2041m05"]


@pytest.mark.django_db
def test_an_installation_made_on_the_first_accepts_last_months_usage(tenant, limiter_clock):
    """Installed (migrate) at 00:05 on the 1st, a gateway reports a request that started at
    23:59 the day before: its month has a partition."""
    now = datetime(2040, 6, 1, 0, 5, tzinfo=UTC)
    limiter_clock.freeze(now)
    usage_partitions_ensure(now=now)
    assert _results([usage_event(tenant, "last-night", now - timedelta(minutes=6))]) == [
        "recorded"]
    assert _partition_of("last-night") == ["quotas_usageevent_y2040m05"]


@pytest.mark.django_db
def test_the_parent_is_partitioned_with_the_indexes_reads_need():
    with connection.cursor() as cursor:
        cursor.execute("SELECT relkind FROM pg_class WHERE relname = 'quotas_usageevent'")
        assert cursor.fetchone()[0] == "p"
        cursor.execute("SELECT indexname FROM pg_indexes WHERE tablename = %s ORDER BY 1",
                       ["quotas_usageevent"])
        assert [n for (n,) in cursor.fetchall()] == [
            "quotas_usageevent_pkey", "usage_finished_brin", "usage_org_started"]
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'quotas_usageevent_pkey'")
        assert cursor.fetchone()[0].endswith("(id, started_at)")


@pytest.mark.django_db
def test_events_go_to_the_partition_of_the_month_they_started_in(tenant, boundary):
    before, after = partition_for((boundary - SECOND).date()), partition_for(boundary.date())
    assert _results([usage_event(tenant, "last", boundary - SECOND),
                     usage_event(tenant, "first", boundary)]) == ["recorded", "recorded"]
    assert _partition_of("last") == [before.name] and _partition_of("first") == [after.name]
    assert set(UsageEventKey.objects.values_list("request_id", flat=True)) == {"last", "first"}


@pytest.mark.django_db
def test_one_request_on_both_sides_of_a_month_in_one_batch_is_recorded_once(tenant, boundary):
    events = [usage_event(tenant, "r1", boundary - SECOND),
              usage_event(tenant, "r1", boundary + SECOND)]
    assert _results(events) == ["recorded", "duplicate"]
    assert _partition_of("r1") == [partition_for((boundary - SECOND).date()).name]
    assert UsageHourly.objects.get().requests == 1


@pytest.mark.django_db
@pytest.mark.parametrize("first_side", [-SECOND, SECOND])
def test_one_request_on_both_sides_of_a_month_in_two_batches_is_recorded_once(
        tenant, boundary, first_side):
    assert _results([usage_event(tenant, "r1", boundary + first_side)]) == ["recorded"]
    assert _results([usage_event(tenant, "r1", boundary - first_side)]) == ["duplicate"]
    assert len(_partition_of("r1")) == 1
    hourly = UsageHourly.objects.get()
    assert (hourly.hour, hourly.requests) == (
        (boundary + first_side).replace(minute=0, second=0), 1)


@pytest.mark.django_db(transaction=True)
def test_one_request_on_both_sides_of_a_month_at_once_is_recorded_once(limiter, boundary):
    tenant = routed_tenant()
    threads_n = 8
    start = threading.Barrier(threads_n)
    outcomes, errors = [], []

    def report(n: int) -> None:
        side = boundary - SECOND * (n + 1) if n % 2 else boundary + SECOND * n
        try:
            start.wait()
            outcomes.extend(_results([usage_event(tenant, "shared", side)]))
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=report, args=(n,)) for n in range(threads_n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(outcomes) == ["duplicate"] * (threads_n - 1) + ["recorded"]
    assert UsageEvent.objects.count() == 1 and UsageEventKey.objects.count() == 1
    assert sum(UsageHourly.objects.values_list("requests", flat=True)) == 1


@pytest.mark.django_db(transaction=True)
def test_batches_sharing_request_ids_in_any_order_never_deadlock(limiter, limiter_clock):
    tenant = routed_tenant()
    now = limiter_clock.now()
    ids = [f"shared-{n}" for n in range(500)]
    threads_n = 8
    start = threading.Barrier(threads_n)
    recorded, errors = [], []

    def report(seed: int) -> None:
        order = random.Random(seed).sample(ids, len(ids))
        try:
            start.wait()
            results = usage_record(events=[usage_event(tenant, i, now) for i in order])
            recorded.extend(r.request_id for r in results if r.result == "recorded")
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=report, args=(n,)) for n in range(threads_n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(recorded) == sorted(ids)
    assert sum(UsageHourly.objects.values_list("requests", flat=True)) == len(ids)


@pytest.mark.django_db
def test_an_event_with_no_partition_to_go_in_is_rejected_alone(tenant, limiter_clock):
    now = limiter_clock.now()
    results = usage_record(events=[
        usage_event(tenant, "now", now - SECOND),
        usage_event(tenant, "far-ahead", now + timedelta(days=5 * 365)),
        usage_event(tenant, "past-retention", now - timedelta(days=91)),
    ])
    assert [(r.result, r.error_code) for r in results] == [
        ("recorded", ""), ("rejected", "started_at_out_of_range"),
        ("rejected", "started_at_out_of_range")]
    assert "usage is kept 90 days" in results[2].error_message
    assert list(UsageEvent.objects.values_list("request_id", flat=True)) == ["now"]


@pytest.mark.django_db(transaction=True)  # the served app's threads read the rows
def test_the_usage_api_rejects_such_an_event_on_its_own(limiter):
    tenant = routed_tenant()
    gateway_token_cache_clear()
    _, token = gateway_token_create(name="edge", actor="test")
    now = datetime.now(UTC)

    def body(request_id, started_at):
        e = usage_event(tenant, request_id, started_at)
        return {"request_id": e.request_id, "reservation_id": e.reservation_id,
                "input_tokens": 1, "output_tokens": 1, "status": "completed",
                "started_at": started_at.isoformat(),
                "first_token_at": None, "finished_at": (started_at + SECOND).isoformat()}

    response = HookClient(HTTP_AUTHORIZATION=f"Bearer {token}").post(
        "/api/gateway/v1/usage", {"events": [body("ok", now - SECOND),
                                             body("ancient", datetime(2001, 1, 1, tzinfo=UTC))]},
        content_type="application/json")
    assert response.status_code == 200
    answer = response.json()
    assert (answer["recorded"], answer["rejected"]) == (1, 1)
    assert answer["results"][1]["error"]["code"] == "started_at_out_of_range"


def _migrated_to(executor: MigrationExecutor, targets) -> None:
    executor.loader.build_graph()
    executor.migrate(targets)


@pytest.mark.django_db(transaction=True)
def test_existing_events_move_into_monthly_partitions():
    executor = MigrationExecutor(connection)
    before = next(parent.key for parent in executor.loader.graph.node_map[PARTITIONING].parents
                  if parent.key[0] == "quotas")
    from tests.factories import OrganizationFactory, PoolFactory

    # Made with today's models, before the schema goes back to the unpartitioned table (and
    # before later migrations' columns, which the factories would write).
    org, pool = OrganizationFactory(), PoolFactory()
    _migrated_to(executor, [before])
    try:
        assert not usage_events_partitioned()
        starts = [datetime(2025, 1, 31, 23, 59, 59, tzinfo=UTC),
                  datetime(2025, 2, 1, tzinfo=UTC), datetime(2025, 4, 9, 8, tzinfo=UTC)]
        with connection.cursor() as cursor:
            for n, started in enumerate(starts, start=1):
                cursor.execute(
                    "INSERT INTO quotas_usageevent (id, request_id, org_id, pool_id, status, "
                    "input_tokens, output_tokens, started_at, finished_at, premium_eligible, "
                    "unreserved, received_at) VALUES (%s, %s, %s, %s, 'completed', 1, 2, %s, "
                    "%s, true, false, %s)",
                    [n * 10, f"old-{n}", org.pk, pool.pk, started, started + SECOND, started])
        _migrated_to(executor, executor.loader.graph.leaf_nodes())

        assert _partition_of("old-1") == ["quotas_usageevent_y2025m01"]
        assert _partition_of("old-2") == ["quotas_usageevent_y2025m02"]
        assert _partition_of("old-3") == ["quotas_usageevent_y2025m04"]
        # Every month from the oldest event to next month has its partition, gaps included.
        months = {p.month for p in usage_partitions()}
        month = starts[0].date().replace(day=1)
        while month <= month_after(timezone.now().date().replace(day=1)):
            assert month in months
            month = month_after(month)
        assert sorted(UsageEvent.objects.values_list("id", "request_id")) == [
            (10, "old-1"), (20, "old-2"), (30, "old-3")]
        assert set(UsageEventKey.objects.values_list("request_id", flat=True)) == {
            "old-1", "old-2", "old-3"}
        # The id sequence carries on after the moved rows.
        new = UsageEvent.objects.create(
            request_id="new", org=org, pool=pool, status="completed", input_tokens=1,
            output_tokens=1, started_at=timezone.now(), finished_at=timezone.now())
        assert new.pk > 30
    finally:
        _migrated_to(executor, executor.loader.graph.leaf_nodes())
        usage_partitions_for_tests()
