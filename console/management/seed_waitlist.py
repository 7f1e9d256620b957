"""Demo data for the waitlist, called by the seed_demo command: applications in every state (two
of them admitted by an opened wave) and two scheduled waves. Everything goes through the
services, so the audit log and the queue look real. Idempotent: orgs are keyed by slug, waves
by (pool, name); running it again changes nothing."""

from datetime import timedelta

from django.contrib.auth import get_user_model
from django.utils import timezone

from orgs.models import Organization, Role
from orgs.services import membership_add, org_create
from quotas.models import CapacityPool
from rollout.applications import (
    application_check_set,
    application_decide,
    application_reviewer_assign,
    application_submit,
)
from rollout.models import RolloutWave
from rollout.waves import wave_create, wave_open

# slug -> (name, use case, latency, peak TPS, what happens to the application)
DEMO_APPLICANTS = {
    "seed-vox": ("Vox Realtime", "voice", "realtime", 300, "admitted"),
    "seed-loop": ("Loop Agents", "agents", "realtime", 400, "admitted"),
    "seed-codewright": ("Codewright", "coding", "interactive", 500, "approved"),
    "seed-chatter": ("Chatter", "chat", "interactive", 250, "approved"),
    "seed-batchworks": ("Batchworks", "batch", "none", 2_000, "approved"),
    "seed-fresh": ("Fresh Start", "agents", "interactive", 150, "submitted"),
    "seed-review": ("Review Pending", "coding", "interactive", 300, "in_review"),
    "seed-vague": ("Vague Labs", "other", "tolerant", 800, "info_requested"),
    "seed-rejected": ("Arbitrage Bots", "other", "none", 5_000, "rejected"),
}
WAVE_DEFAULTS = {"guaranteed_tps": 200, "burst_tps": 400, "daily_tokens": 20_000_000,
                 "max_concurrency": 16}


def _applicant(slug: str, name: str, operator):
    user, _ = get_user_model().objects.get_or_create(
        username=f"owner@{slug}.test", defaults={"email": f"owner@{slug}.test"})
    org = org_create(name=name, slug=slug, actor=operator)
    membership_add(org=org, user=user, role=Role.OWNER, actor=operator)
    return org, user


def _apply(*, org, user, region: str, use_case: str, latency: str, peak: int):
    return application_submit(org=org, actor=user, data={
        "legal_name": f"{org.name} Inc.", "website": f"https://{org.slug}.example",
        "country": "US", "contact_name": f"{org.name} CTO", "contact_email": user.email,
        "use_case": use_case, "use_case_description": f"{org.name}: {use_case} workloads.",
        "expected_peak_tps": peak, "expected_daily_tokens": peak * 40_000,
        "latency_sensitivity": latency, "preferred_region": region,
    })


def vet(app, *, outcome: str, pool: CapacityPool, operator) -> None:
    if outcome == "submitted":
        return
    application_reviewer_assign(application=app, reviewer=operator, actor=operator)
    if outcome == "in_review":
        return
    for item in ("identity_verified", "use_case_acceptable", "contact_reachable"):
        application_check_set(application=app, item=item, done=True, actor=operator)
    if outcome == "info_requested":
        application_decide(application=app, decision="request_info", reason="unclear volume",
                           shared_reason="What peak TPS do you expect in the first month?",
                           actor=operator)
    elif outcome == "rejected":
        application_decide(application=app, decision="reject", reason="latency-insensitive",
                           shared_reason="Your workload does not need the fast tier.",
                           actor=operator)
    else:  # approved, and later admitted by the design-partner wave
        application_decide(application=app, decision="approve", reason="good fit",
                           actor=operator, pool_id=pool.pk)


def _wave(*, pool, name: str, opens_at, capacity_tps: int, max_orgs: int, operator):
    existing = RolloutWave.objects.filter(pool=pool, name=name).first()
    return existing or wave_create(pool=pool, name=name, opens_at=opens_at,
                                   capacity_tps=capacity_tps, max_orgs=max_orgs,
                                   actor=operator, **WAVE_DEFAULTS)


def seed_waitlist(*, pool: CapacityPool, operator) -> None:
    now = timezone.now()
    # Admitted first: approve the two design partners alone, then open their wave.
    for wanted in (("admitted",), ("approved", "submitted", "in_review", "info_requested",
                                   "rejected")):
        for slug, (name, use_case, latency, peak, outcome) in DEMO_APPLICANTS.items():
            if outcome not in wanted or Organization.objects.filter(slug=slug).exists():
                continue
            org, user = _applicant(slug, name, operator)
            app = _apply(org=org, user=user, region=pool.region, use_case=use_case,
                         latency=latency, peak=peak)
            vet(app, outcome=outcome, pool=pool, operator=operator)
        if wanted == ("admitted",):
            first = _wave(pool=pool, name="Design partners", opens_at=now - timedelta(days=14),
                          capacity_tps=1_000, max_orgs=2, operator=operator)
            if first.state == "scheduled":
                wave_open(wave=first, actor=operator)
    _wave(pool=pool, name="Wave 2", opens_at=now + timedelta(days=7), capacity_tps=500,
          max_orgs=2, operator=operator)
    _wave(pool=pool, name="General availability", opens_at=now + timedelta(days=28),
          capacity_tps=2_000, max_orgs=20, operator=operator)
