"""Demo data for a fresh install: one fast-tier pool, ~20 organizations across every lifecycle
state, allocations for the active ones, an operator and an org owner.

Idempotent: every object is looked up by a natural key first, and orgs are walked through the
lifecycle services only up to their target state, so a second run changes nothing.
"""

from decimal import Decimal

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from console.management.seed_waitlist import seed_waitlist
from orgs import services
from orgs.models import Membership, Organization, OrgStatus, Role
from quotas.models import Allocation, AllocationStatus, CapacityPool
from quotas.services import allocation_grant, pool_create

DEMO_PASSWORD = "sluice-demo"  # noqa: S105 - printed by `dev.py run`, demo data only
OPERATOR_EMAIL = "operator@sluice.dev"
OWNER_EMAIL = "owner@acme.dev"
ACTOR = "seed_demo"

# Paths through the lifecycle, by target state.
PATHS = {
    OrgStatus.APPLIED: [],
    OrgStatus.IN_REVIEW: ["review_start"],
    OrgStatus.APPROVED: ["review_start", "approve"],
    OrgStatus.ACTIVE: ["review_start", "approve", "admit"],
    OrgStatus.REJECTED: ["review_start", "reject"],
    OrgStatus.SUSPENDED: ["review_start", "approve", "admit", "suspend"],
    OrgStatus.OFFBOARDED: ["review_start", "approve", "admit", "offboard"],
}
STEP_SERVICES = {
    "review_start": services.org_review_start,
    "approve": services.org_approve,
    "admit": services.org_admit,
    "reject": services.org_reject,
    "suspend": services.org_suspend,
    "offboard": services.org_offboard,
}

# (name, target state, guaranteed TPS for active/suspended orgs)
ORGS = [
    ("Acme Voice", OrgStatus.ACTIVE, 12_000),
    ("Parrot Labs", OrgStatus.ACTIVE, 10_000),
    ("Loopwise Agents", OrgStatus.ACTIVE, 9_000),
    ("Cobalt Code", OrgStatus.ACTIVE, 8_000),
    ("Tessellate", OrgStatus.ACTIVE, 6_000),
    ("Harbor Health", OrgStatus.ACTIVE, 5_000),
    ("Quillstream", OrgStatus.ACTIVE, 4_000),
    ("Nimbus Support", OrgStatus.ACTIVE, 3_000),
    ("Driftwood AI", OrgStatus.SUSPENDED, 2_000),
    ("Kite Commerce", OrgStatus.SUSPENDED, 2_000),
    ("Beacon Tutors", OrgStatus.APPROVED, 0),
    ("Sundial Games", OrgStatus.APPROVED, 0),
    ("Ferrous Robotics", OrgStatus.APPROVED, 0),
    ("Marlin Legal", OrgStatus.IN_REVIEW, 0),
    ("Orchard Analytics", OrgStatus.IN_REVIEW, 0),
    ("Plume Translate", OrgStatus.IN_REVIEW, 0),
    ("Granite Batch Co", OrgStatus.APPLIED, 0),
    ("Willow Notes", OrgStatus.APPLIED, 0),
    ("Spamfast", OrgStatus.REJECTED, 0),
    ("Oldtown Chat", OrgStatus.OFFBOARDED, 0),
]


class Command(BaseCommand):
    help = "Load demo data (idempotent)."

    def handle(self, *args, **options):
        # No transaction around the whole: every step is a service that commits on its own.
        operator = self._user(OPERATOR_EMAIL, staff=True)
        owner = self._user(OWNER_EMAIL, staff=False)
        pool = self._pool()
        created = 0
        for name, target, tps in ORGS:
            org, was_created = self._org(name, target)
            created += was_created
            if tps and target in (OrgStatus.ACTIVE, OrgStatus.SUSPENDED):
                self._allocation(org, pool, tps)
        acme = Organization.objects.get(slug="acme-voice")
        if not Membership.objects.filter(org=acme, user=owner).exists():
            services.membership_add(org=acme, user=owner, role=Role.OWNER, actor=ACTOR)
        self._extensions(pool=pool, operator=operator)
        self.stdout.write(f"Demo data ready ({created} new organizations).")

    def _extensions(self, *, pool, operator) -> None:
        """Seed data of the other domains, each idempotent on its own."""
        seed_waitlist(pool=pool, operator=operator)

    def _user(self, email: str, *, staff: bool):
        user, created = get_user_model().objects.get_or_create(
            username=email, defaults={"email": email, "is_staff": staff, "is_superuser": staff})
        if created:
            user.set_password(DEMO_PASSWORD)
            user.save(update_fields=["password"])
        return user

    def _pool(self) -> CapacityPool:
        pool = CapacityPool.objects.filter(model="gpt-5.6-sol", region="us-east",
                                           tier="fast").first()
        return pool or pool_create(model="gpt-5.6-sol", region="us-east", tier="fast",
                                   capacity_tps=120_000, guaranteeable_ratio=Decimal("0.900"),
                                   actor=ACTOR)

    def _org(self, name: str, target: str) -> tuple[Organization, bool]:
        org = Organization.objects.filter(name=name).first()
        if org is not None:
            return org, False
        org = services.org_create(name=name, actor=ACTOR)
        for step in PATHS[target]:
            # Allocations are granted while active, before a suspension or offboarding.
            STEP_SERVICES[step](org=org, actor=ACTOR)
        return org, True

    def _allocation(self, org: Organization, pool: CapacityPool, tps: int) -> None:
        if Allocation.objects.filter(org=org, pool=pool, status=AllocationStatus.ACTIVE).exists():
            return
        allocation_grant(org=org, pool=pool, guaranteed_tps=tps, burst_tps=tps * 2,
                         daily_tokens=tps * 3_600 * 8, max_concurrency=max(tps // 250, 4),
                         actor=ACTOR)
