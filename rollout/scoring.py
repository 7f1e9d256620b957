"""The waitlist priority score: the one formula that ranks approved organizations.

    score = USE_CASE_POINTS[use_case]
          + LATENCY_POINTS[latency_sensitivity]
          + demand_fit_points(expected_peak_tps / reference_tps)

Why these weights: the fast tier exists for latency-sensitive, user-facing work. Voice and agent
loops (a person or a chain of calls waits on every token) rank above coding and chat; batch ranks
last because it gains nothing from speed. Demand that fits comfortably in the capacity being
handed out counts for an org; demand far beyond it counts against (it could not be served, and
would crowd out several smaller orgs). `reference_tps` is the guaranteeable capacity the pool's
next scheduled wave adds, or the pool's guaranteeable capacity when no wave is scheduled.

An operator override replaces the whole score (with a reason, audited). Ties go to the earliest
application: `rank_key` sorts by score descending, then submission time, then id.
"""

from dataclasses import asdict, dataclass
from datetime import datetime

USE_CASE_POINTS = {
    "voice": 50,
    "agents": 50,
    "coding": 35,
    "chat": 25,
    "other": 15,
    "batch": 0,
}

LATENCY_POINTS = {
    "realtime": 30,
    "interactive": 20,
    "tolerant": 5,
    "none": 0,
}

# (upper bound of expected_peak_tps / reference_tps, points), first match wins.
DEMAND_FIT_POINTS = (
    (0.25, 20),
    (0.5, 10),
    (1.0, 0),
    (2.0, -10),
    (float("inf"), -30),
)


def demand_fit_points(*, expected_peak_tps: int, reference_tps: int) -> int:
    if reference_tps <= 0:
        # Nothing to hand out yet: demand can neither fit nor overflow.
        return 0
    ratio = expected_peak_tps / reference_tps
    return next(points for bound, points in DEMAND_FIT_POINTS if ratio <= bound)


@dataclass(frozen=True)
class ScoreBreakdown:
    use_case: str
    use_case_points: int
    latency_sensitivity: str
    latency_points: int
    expected_peak_tps: int
    reference_tps: int
    demand_fit_points: int
    computed: int
    override: int | None
    override_reason: str
    score: int

    def as_dict(self) -> dict:
        return asdict(self)


def score_application(*, application, reference_tps: int) -> ScoreBreakdown:
    """`application` is a rollout.models.Application (or anything with the same fields)."""
    use_case_points = USE_CASE_POINTS[application.use_case]
    latency_points = LATENCY_POINTS[application.latency_sensitivity]
    fit = demand_fit_points(expected_peak_tps=application.expected_peak_tps,
                            reference_tps=reference_tps)
    computed = use_case_points + latency_points + fit
    override = application.score_override
    return ScoreBreakdown(
        use_case=application.use_case, use_case_points=use_case_points,
        latency_sensitivity=application.latency_sensitivity, latency_points=latency_points,
        expected_peak_tps=application.expected_peak_tps, reference_tps=reference_tps,
        demand_fit_points=fit, computed=computed, override=override,
        override_reason=application.score_override_reason,
        score=computed if override is None else override,
    )


def rank_key(*, score: int, submitted_at: datetime, application_id: int) -> tuple:
    return (-score, submitted_at, application_id)
