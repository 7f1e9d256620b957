"""Opening waves: capacity added, best-ranked orgs that fit admitted, once, in one transaction."""

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.utils import timezone

from metering.models import UsageHourly
from orgs.models import Organization, OrgStatus
from orgs.services import org_offboard
from quotas.bookings import BookingAsk, booking_create
from quotas.errors import BookingNoRoom
from quotas.models import Allocation, AllocationStatus
from rollout.models import RolloutWave, WaveState
from rollout.waves import (
    pool_auto_admit_set,
    wave_close,
    wave_open,
    wave_plan,
    waves_close_due,
    waves_open_due,
)
from sluice.errors import Conflict
from tests.factories import (
    AllocationFactory,
    ApplicationFactory,
    PoolFactory,
    RolloutWaveFactory,
)
from tests.waitlist import approved_application

USE_CASES = ["voice", "agents", "coding", "chat", "batch"]


def _queue_of_five(operator, pool):
    """Five approved orgs whose rank is their index (voice first, batch last)."""
    return [approved_application(operator, pool, f"Org {i} {uc}", use_case=uc)
            for i, uc in enumerate(USE_CASES)]


def _active_allocations(pool) -> list[str]:
    return sorted(Allocation.objects.filter(pool=pool, status=AllocationStatus.ACTIVE)
                  .values_list("org__name", flat=True))


@pytest.mark.django_db
def test_a_wave_that_cannot_fit_everyone_admits_exactly_the_best_that_fit(operator):
    # 1,000 + 1,000 TPS at 0.9 guaranteeable = 1,800: three guarantees of 500 fit, not four.
    pool = PoolFactory(region="us-east", capacity_tps=1_000)
    apps = _queue_of_five(operator, pool)
    wave = RolloutWaveFactory(pool=pool, capacity_tps=1_000, guaranteed_tps=500, max_orgs=10)
    plan = wave_plan(wave=wave)
    assert [e.application.pk for e in plan.admitted] == [a.pk for a in apps[:3]]
    assert (plan.guaranteed_tps_after, plan.free_tps_after, plan.queued_after) == (1_500, 300, 2)

    wave_open(wave=wave, actor=operator)

    statuses = dict(Organization.objects.filter(pk__in=[a.org_id for a in apps])
                    .values_list("name", "status"))
    assert statuses == {"Org 0 voice": "active", "Org 1 agents": "active",
                        "Org 2 coding": "active", "Org 3 chat": "approved",
                        "Org 4 batch": "approved"}
    assert _active_allocations(pool) == ["Org 0 voice", "Org 1 agents", "Org 2 coding"]
    pool.refresh_from_db()
    wave.refresh_from_db()
    assert (pool.capacity_tps, wave.state, wave.admitted_count) == (2_000, WaveState.OPEN, 3)


@pytest.mark.django_db
def test_max_orgs_caps_a_wave_even_with_room_left(operator):
    pool = PoolFactory(region="us-east", capacity_tps=100_000)
    _queue_of_five(operator, pool)
    wave = RolloutWaveFactory(pool=pool, capacity_tps=0, max_orgs=2)
    wave_open(wave=wave, actor=operator)
    assert _active_allocations(pool) == ["Org 0 voice", "Org 1 agents"]


@pytest.mark.django_db
def test_open_twice_or_after_close_is_refused(operator):
    wave = RolloutWaveFactory()
    wave_open(wave=wave, actor=operator)
    with pytest.raises(Conflict) as exc:
        wave_open(wave=wave, actor=operator)
    assert exc.value.code == "wave_not_scheduled"
    wave_close(wave=wave, actor=operator)
    with pytest.raises(Conflict):
        wave_close(wave=wave, actor=operator)
    cancelled = RolloutWaveFactory()
    wave_close(wave=cancelled, actor=operator, reason="fleet delayed")
    with pytest.raises(Conflict):
        wave_open(wave=cancelled, actor=operator)
    assert RolloutWave.objects.get(pk=cancelled.pk).opened_at is None


@pytest.mark.django_db
def test_beat_opens_only_due_waves(operator):
    due = RolloutWaveFactory(opens_at=timezone.now() - timedelta(seconds=1))
    later = RolloutWaveFactory(opens_at=timezone.now() + timedelta(hours=1))
    assert waves_open_due() == 1
    assert RolloutWave.objects.get(pk=due.pk).state == WaveState.OPEN
    assert RolloutWave.objects.get(pk=later.pk).state == WaveState.SCHEDULED


def _run_concurrently(target, args_list) -> list:
    barrier = threading.Barrier(len(args_list))
    results = []

    def worker(*args):
        try:
            barrier.wait()
            results.append(target(*args))
        except Exception as exc:  # collected and asserted on by the test
            results.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=args) for args in args_list]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


@pytest.mark.django_db(transaction=True)
def test_eight_workers_opening_one_wave_admit_each_org_once(operator):
    pool = PoolFactory(region="us-east", capacity_tps=1_000)
    _queue_of_five(operator, pool)
    wave = RolloutWaveFactory(pool=pool, capacity_tps=1_000, guaranteed_tps=500)

    results = _run_concurrently(lambda: wave_open(wave=wave, actor="celery:wave_open"),
                                [() for _ in range(8)])

    assert sum(isinstance(r, RolloutWave) for r in results) == 1
    assert all(isinstance(r, (RolloutWave, Conflict)) for r in results), results
    assert _active_allocations(pool) == ["Org 0 voice", "Org 1 agents", "Org 2 coding"]
    pool.refresh_from_db()
    assert pool.capacity_tps == 2_000  # capacity added once


@pytest.mark.django_db(transaction=True)
def test_two_waves_of_one_pool_opening_together_never_admit_an_org_twice(operator):
    pool = PoolFactory(region="us-east", capacity_tps=0)
    _queue_of_five(operator, pool)
    waves = [RolloutWaveFactory(pool=pool, capacity_tps=1_200, guaranteed_tps=500)
             for _ in range(2)]

    results = _run_concurrently(lambda w: wave_open(wave=w, actor="celery:wave_open"),
                                [(w,) for w in waves])

    assert all(isinstance(r, RolloutWave) for r in results), results
    # 2,400 TPS at 0.9 = 2,160 guaranteeable: four guarantees of 500, each org at most once.
    counts = sorted(Allocation.objects.filter(pool=pool).values_list("org_id", flat=True))
    assert len(counts) == len(set(counts)) == 4
    assert sorted(r.admitted_count for r in results) == [2, 2]


@pytest.mark.django_db
def test_auto_admission_is_off_by_default_and_fills_freed_capacity_when_on(
    operator, django_capture_on_commit_callbacks,
):
    pool = PoolFactory(region="us-east", capacity_tps=1_000)  # 900 guaranteeable
    wave = RolloutWaveFactory(pool=pool, capacity_tps=0, guaranteed_tps=450, max_orgs=1)
    first = approved_application(operator, pool, "First", use_case="voice")
    wave_open(wave=wave, actor=operator)  # admits First (max_orgs=1)
    incumbent = AllocationFactory(pool=pool, guaranteed_tps=450, org__name="Incumbent")
    waiting = approved_application(operator, pool, "Waiting", use_case="chat")

    with django_capture_on_commit_callbacks(execute=True):
        org_offboard(org=incumbent.org, actor=operator)
    waiting.org.refresh_from_db()
    assert waiting.org.status == OrgStatus.APPROVED  # off by default: still queued

    pool_auto_admit_set(pool=pool, enabled=True, actor=operator)
    second = AllocationFactory(pool=pool, guaranteed_tps=450, org__name="Second")
    with django_capture_on_commit_callbacks(execute=True):
        org_offboard(org=second.org, actor=operator)
    waiting.org.refresh_from_db()
    assert waiting.org.status == OrgStatus.ACTIVE
    allocation = Allocation.objects.get(org=waiting.org, status=AllocationStatus.ACTIVE)
    assert allocation.guaranteed_tps == wave.guaranteed_tps  # the latest wave's default
    assert first.org_id != waiting.org_id


@pytest.mark.django_db
def test_beat_closes_waves_past_their_end(operator):
    wave = RolloutWaveFactory(opens_at=timezone.now() - timedelta(days=2),
                              closes_at=timezone.now() - timedelta(days=1))
    waves_open_due()
    assert waves_close_due() == 1
    wave.refresh_from_db()
    assert wave.state == WaveState.CLOSED


@pytest.mark.django_db
def test_plan_projects_demand_from_observed_usage_of_similar_admitted_orgs(operator):
    pool = PoolFactory(region="us-east", capacity_tps=10_000)
    incumbent = AllocationFactory(pool=pool, guaranteed_tps=500, burst_tps=1_000)
    ApplicationFactory(org=incumbent.org, use_case="voice", expected_peak_tps=400,
                       state="admitted")
    hour = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=2)
    # Its busiest hour averaged 100 output tokens/s: a quarter of the 400 it expected.
    UsageHourly.objects.create(org=incumbent.org, pool=pool, hour=hour,
                               output_tokens=100 * 3600)
    UsageHourly.objects.create(org=incumbent.org, pool=pool, hour=hour - timedelta(hours=1),
                               output_tokens=10 * 3600)
    candidate = approved_application(operator, pool, "Voice 2", use_case="voice",
                                     expected_peak_tps=800)
    wave = RolloutWaveFactory(pool=pool, capacity_tps=0, guaranteed_tps=500, burst_tps=1_000)

    plan = wave_plan(wave=wave)

    assert [e.application.pk for e in plan.admitted] == [candidate.pk]
    assert plan.projection_uses_observed_usage is True
    assert plan.projected_tps == pytest.approx(100 + 800 * 0.25)
    assert plan.projected_utilization == pytest.approx(300 / 10_000)


@pytest.mark.django_db
def test_the_planner_and_the_opening_see_bookings_and_never_count_the_wave_before_it_opens(
        operator):
    # 1,000 TPS at 0.9 = 900 guaranteeable today; the wave would bring 1,800.
    pool = PoolFactory(region="us-east", capacity_tps=1_000)
    holder = AllocationFactory(pool=pool, guaranteed_tps=100, burst_tps=100).org
    start = (datetime.now(UTC) + timedelta(days=2)).replace(minute=0, second=0, microsecond=0)
    window = BookingAsk(starts_at=start, ends_at=start + timedelta(hours=2), output_tps=800)
    booking_create(org=holder, pool=pool, ask=window, actor="test")
    # Capacity a scheduled wave will add is not sold before it is in the pool.
    RolloutWaveFactory(pool=pool, capacity_tps=1_000, guaranteed_tps=500, max_orgs=10)
    with pytest.raises(BookingNoRoom):
        booking_create(org=holder, pool=pool, ask=BookingAsk(
            starts_at=start, ends_at=start + timedelta(hours=1), output_tps=1), actor="test")
    apps = _queue_of_five(operator, pool)
    wave = RolloutWave.objects.get(pool=pool)
    plan = wave_plan(wave=wave)
    # 1,800 guaranteeable after; 100 allocated and 800 booked at the busiest instant: 900 free,
    # so one guarantee of 500 fits where, without the booking, three would.
    assert plan.booked_peak_tps == 800
    assert [e.application.pk for e in plan.admitted] == [apps[0].pk]
    wave_open(wave=wave, actor=operator)
    assert _active_allocations(pool) == sorted([holder.name, apps[0].org.name])
