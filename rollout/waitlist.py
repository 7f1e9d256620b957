"""Waitlist reads: each pool's queue of approved orgs, positions, estimated admission, and the
simulation of scheduled waves that both the estimates and the wave planner use.

Nothing here writes. `waitlist_select` is the single rule for "who does a wave admit", shared by
the planner (what would happen), the estimates (what will happen, wave by wave) and `wave_open`
(what happens), so the three cannot disagree.
"""

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import timedelta

from django.db.models import Count, Sum
from django.utils import timezone

from metering.models import UsageHourly
from orgs.models import Organization, OrgStatus
from quotas.ledger import pool_standing_free
from quotas.models import CapacityPool
from quotas.selectors import allocations_in_force
from rollout.models import Application, ApplicationState, RolloutWave, WaveState
from rollout.scoring import ScoreBreakdown, rank_key, score_application


@dataclass(frozen=True)
class QueueEntry:
    application: Application
    breakdown: ScoreBreakdown
    position: int

    @property
    def org_id(self) -> int:
        return self.application.org_id


@dataclass(frozen=True)
class WaitlistEstimate:
    pool: CapacityPool
    position: int
    queue_length: int
    wave: RolloutWave | None  # None: no scheduled wave has room for this org yet

    @property
    def label(self) -> str:
        if self.wave is None:
            return "not yet scheduled"
        return f"{self.wave.name}, opening {self.wave.opens_at:%Y-%m-%d %H:%M} UTC"


def guaranteeable_added(*, pool: CapacityPool, capacity_tps: int, added_tps: int) -> int:
    """Guaranteeable tokens/s that `added_tps` of raw capacity brings to a pool of
    `capacity_tps` (floors are taken on totals, like CapacityPool.guaranteeable_tps)."""
    ratio = pool.guaranteeable_ratio
    return (CapacityPool.guaranteeable_for(capacity_tps + added_tps, ratio)
            - CapacityPool.guaranteeable_for(capacity_tps, ratio))


def scheduled_waves(*, pool: CapacityPool) -> list[RolloutWave]:
    return list(RolloutWave.objects.filter(pool=pool, state=WaveState.SCHEDULED)
                .order_by("opens_at", "id"))


def reference_tps(*, pool: CapacityPool | None, next_wave: RolloutWave | None) -> int:
    """What demand is measured against in the score (see rollout/scoring.py)."""
    if pool is None:
        return 0
    if next_wave is None:
        return pool.guaranteeable_tps
    return guaranteeable_added(pool=pool, capacity_tps=pool.capacity_tps,
                               added_tps=next_wave.capacity_tps)


def _next_waves(pool_ids) -> dict[int, RolloutWave]:
    nexts: dict[int, RolloutWave] = {}
    waves = RolloutWave.objects.filter(pool_id__in=pool_ids, state=WaveState.SCHEDULED)
    for wave in waves.order_by("opens_at", "id"):
        nexts.setdefault(wave.pool_id, wave)
    return nexts


def application_scores(applications: list[Application], *,
                       wave: RolloutWave | None = None) -> dict[int, ScoreBreakdown]:
    """Score breakdowns by application id, against each org's queue pool, in one query. The
    applications must come with `org__pool_preference__pool` selected. `wave` is the wave
    being planned or opened: it is the reference for its pool instead of the next scheduled
    one, so the planner and the opening rank exactly alike."""
    pools = {}
    for app in applications:
        pref = getattr(app.org, "pool_preference", None)
        pools[app.pk] = pref.pool if pref else None
    pool_ids = {p.pk for p in pools.values() if p is not None}
    nexts = _next_waves(pool_ids) if pool_ids else {}
    if wave is not None:
        nexts[wave.pool_id] = wave
    return {
        app.pk: score_application(
            application=app,
            reference_tps=reference_tps(pool=pools[app.pk],
                                        next_wave=nexts.get(getattr(pools[app.pk], "pk", None))),
        )
        for app in applications
    }


def _queued_applications(pool_ids):
    """Approved, not yet admitted: the application is approved and so is its org."""
    return (Application.objects.filter(
        state=ApplicationState.APPROVED, org__status=OrgStatus.APPROVED,
        org__pool_preference__pool_id__in=pool_ids,
    ).select_related("org__pool_preference__pool"))


def _rank(applications: list[Application], scores: dict[int, ScoreBreakdown]
          ) -> list[QueueEntry]:
    ordered = sorted(applications, key=lambda a: rank_key(
        score=scores[a.pk].score, submitted_at=a.submitted_at, application_id=a.pk))
    return [QueueEntry(application=a, breakdown=scores[a.pk], position=i)
            for i, a in enumerate(ordered, start=1)]


def waitlist_queue(*, pool: CapacityPool, wave: RolloutWave | None = None) -> list[QueueEntry]:
    """The pool's queue, best first (`wave`: see application_scores)."""
    applications = list(_queued_applications([pool.pk]))
    return _rank(applications, application_scores(applications, wave=wave))


def waitlist_queues(*, pool_ids) -> dict[int, list[QueueEntry]]:
    """Several pools' queues in two queries."""
    applications = list(_queued_applications(pool_ids))
    scores = application_scores(applications)
    by_pool = defaultdict(list)
    for app in applications:
        by_pool[app.org.pool_preference.pool_id].append(app)
    return {pool_id: _rank(apps, scores) for pool_id, apps in by_pool.items()}


def waitlist_select(*, queue: list[QueueEntry], free_tps: int, guaranteed_tps: int,
                    max_orgs: int | None) -> tuple[list[QueueEntry], int]:
    """The orgs an admission takes: best-ranked first, each with `guaranteed_tps`, while it fits
    in `free_tps` and up to `max_orgs`. An org that does not fit is skipped and stays queued.
    Returns the chosen entries and the guaranteeable TPS left free."""
    chosen = []
    for entry in queue:
        if max_orgs is not None and len(chosen) == max_orgs:
            break
        if guaranteed_tps <= free_tps:
            chosen.append(entry)
            free_tps -= guaranteed_tps
    return chosen, free_tps


def pool_free_tps(*, pool: CapacityPool, guaranteeable_tps: int | None = None) -> int:
    """What a new standing allocation can still be guaranteed: free at the busiest instant to
    come, confirmed bookings included (against `guaranteeable_tps` if given: after a wave)."""
    return max(pool_standing_free(pool=pool, guaranteeable_tps=guaranteeable_tps).output_tps, 0)


def waitlist_estimates(*, pool: CapacityPool) -> dict[int, WaitlistEstimate]:
    """Per queued org: its position and the scheduled wave that would admit it, simulating the
    pool's scheduled waves in opening order against today's free capacity."""
    queue = waitlist_queue(pool=pool)
    capacity, free = pool.capacity_tps, pool_free_tps(pool=pool)
    admitted_by: dict[int, RolloutWave] = {}
    remaining = queue
    for wave in scheduled_waves(pool=pool):
        free += guaranteeable_added(pool=pool, capacity_tps=capacity, added_tps=wave.capacity_tps)
        capacity += wave.capacity_tps
        chosen, free = waitlist_select(queue=remaining, free_tps=free,
                                       guaranteed_tps=wave.guaranteed_tps, max_orgs=wave.max_orgs)
        admitted_by.update({entry.org_id: wave for entry in chosen})
        remaining = [entry for entry in remaining if entry.org_id not in admitted_by]
    return {
        entry.org_id: WaitlistEstimate(pool=pool, position=entry.position,
                                       queue_length=len(queue),
                                       wave=admitted_by.get(entry.org_id))
        for entry in queue
    }


def org_waitlist_estimate(*, org: Organization) -> WaitlistEstimate | None:
    """None unless the org is approved and queued for a pool."""
    pref = getattr(org, "pool_preference", None)
    if org.status != OrgStatus.APPROVED or pref is None:
        return None
    return waitlist_estimates(pool=pref.pool).get(org.pk)


# --- Projected utilization for the planner ---------------------------------------------------

OBSERVATION_WINDOW = timedelta(days=7)


def _observed_peak_tps(*, pool: CapacityPool, org_ids) -> dict[int, float]:
    """Each org's busiest hour in the window, as average output tokens/s over that hour."""
    since = timezone.now() - OBSERVATION_WINDOW
    hours = (UsageHourly.objects.filter(pool=pool, org_id__in=org_ids, hour__gte=since)
             .values("org_id", "hour").annotate(out=Sum("output_tokens")))
    peaks: dict[int, float] = {}
    for row in hours:
        peaks[row["org_id"]] = max(peaks.get(row["org_id"], 0.0), row["out"] / 3600)
    return peaks


@dataclass
class DemandModel:
    """Expected demand, corrected by what similar (same use case) admitted orgs really used."""

    realization_by_use_case: dict[str, float] = field(default_factory=dict)
    admitted_projected_tps: float = 0.0
    observed: bool = False

    def project(self, application: Application, *, burst_tps: int) -> float:
        factor = self.realization_by_use_case.get(application.use_case, 1.0)
        return min(application.expected_peak_tps * factor, burst_tps)


def demand_model(*, pool: CapacityPool) -> DemandModel:
    allocations = list(allocations_in_force().filter(pool=pool))
    org_ids = [a.org_id for a in allocations]
    latest = {}
    for app in Application.objects.filter(org_id__in=org_ids).order_by("submitted_at", "id"):
        latest[app.org_id] = app
    peaks = _observed_peak_tps(pool=pool, org_ids=org_ids)
    ratios = defaultdict(list)
    model = DemandModel(observed=bool(peaks))
    for allocation in allocations:
        app = latest.get(allocation.org_id)
        if allocation.org_id in peaks:
            model.admitted_projected_tps += peaks[allocation.org_id]
            if app is not None:
                ratios[app.use_case].append(peaks[allocation.org_id] / app.expected_peak_tps)
        else:
            expected = app.expected_peak_tps if app else allocation.guaranteed_tps
            model.admitted_projected_tps += min(expected, allocation.burst_tps)
    model.realization_by_use_case = {uc: min(sum(r) / len(r), 1.0) for uc, r in ratios.items()}
    return model


def application_rows(applications: list[Application]) -> list[Application]:
    """Attach `.score` (ScoreBreakdown) and `.position` (None unless queued) to each
    application, for lists and detail pages; a fixed number of queries whatever the length.
    The applications must come with `org__pool_preference__pool` selected."""
    scores = application_scores(applications)
    queued_pools = {app.org.pool_preference.pool_id for app in applications
                    if app.state == ApplicationState.APPROVED
                    and hasattr(app.org, "pool_preference")}
    positions = {entry.application.pk: entry.position
                 for queue in (waitlist_queues(pool_ids=queued_pools).values()
                               if queued_pools else [])
                 for entry in queue}
    for app in applications:
        app.score = scores[app.pk]
        app.position = positions.get(app.pk)
    return applications


def vetting_queue(*, state: str = "", use_case: str = "", pool_id: int | None = None,
                  min_score: int | None = None, max_score: int | None = None
                  ) -> list[Application]:
    """Applications for the vetting queue, best score first (ties: earliest), each with
    `.score` and `.position` (see application_rows). Scores depend on pools and scheduled
    waves, so the score filter runs in Python after a fixed number of queries."""
    apps = Application.objects.select_related("org__pool_preference__pool", "reviewer")
    if state:
        apps = apps.filter(state=state)
    if use_case:
        apps = apps.filter(use_case=use_case)
    if pool_id:
        apps = apps.filter(org__pool_preference__pool_id=pool_id)
    rows = [a for a in application_rows(list(apps))
            if (min_score is None or a.score.score >= min_score)
            and (max_score is None or a.score.score <= max_score)]
    rows.sort(key=lambda a: rank_key(score=a.score.score, submitted_at=a.submitted_at,
                                     application_id=a.pk))
    return rows


def waitlist_lengths() -> dict[int, int]:
    """Queued orgs per pool (approved, not yet admitted), in one GROUP BY."""
    return dict(_queued_applications(CapacityPool.objects.values("pk"))
                .values_list("org__pool_preference__pool_id").annotate(n=Count("id"))
                .order_by())
