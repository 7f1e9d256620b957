"""Demo data for a fresh install: one fast-tier pool, ~20 organizations across every lifecycle
state (each with its application, vetted through the same services as in the console),
allocations for the active ones, an operator and an org owner whose email is confirmed, prices
with the fast-tier premium, bookings of capacity (demo_bookings.py), and a month of usage with
last month's invoices (demo_usage.py).

Idempotent: every object is looked up by a natural key first, and orgs are walked through the
services only up to their target state, so a second run changes nothing.

`--credentials PATH` (what `dev.py run` passes): also a gateway token for the reference gateway
and an API key of the demo owner's org (Acme Voice), whose plaintexts are kept in PATH (0600:
the database keeps only digests) so the banner can print a snippet that works; made again when
the database no longer knows them.
"""

import json
from decimal import Decimal
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from console.management.demo_bookings import seed_bookings
from console.management.demo_usage import seed_usage
from console.management.seed_waitlist import seed_waitlist, vet
from orgs import services
from orgs.models import ApiKey, Membership, Organization, OrgStatus, Role
from orgs.services.api_keys import api_key_create
from quotas.hook.gateway_tokens import gateway_token_create
from quotas.models import Allocation, AllocationStatus, CapacityPool, GatewayToken
from quotas.services import allocation_grant, pool_create
from rollout.applications import application_submit

DEMO_PASSWORD = "sluice-demo"  # noqa: S105 - printed by `dev.py run`, demo data only
OPERATOR_EMAIL = "operator@sluice.dev"
OWNER_EMAIL = "owner@acme.dev"
ACTOR = "seed_demo"
QUICKSTART_KEY_NAME = "Quickstart (dev.py run)"
QUICKSTART_GATEWAY_NAME = "Reference gateway (dev.py run)"

# The application's outcome (seed_waitlist.vet), then the lifecycle steps after admission.
PATHS = {
    OrgStatus.APPLIED: ("submitted", []),
    OrgStatus.IN_REVIEW: ("in_review", []),
    OrgStatus.APPROVED: ("approved", []),
    OrgStatus.ACTIVE: ("approved", ["admit"]),
    OrgStatus.REJECTED: ("rejected", []),
    OrgStatus.SUSPENDED: ("approved", ["admit", "suspend"]),
    OrgStatus.OFFBOARDED: ("approved", ["admit", "offboard"]),
}
STEP_SERVICES = {
    "admit": services.org_admit,
    "suspend": services.org_suspend,
    "offboard": services.org_offboard,
}

# (name, target state, guaranteed TPS for active/suspended orgs, use case, latency, peak TPS)
ORGS = [
    ("Acme Voice", OrgStatus.ACTIVE, 12_000, "voice", "realtime", 10_000),
    ("Parrot Labs", OrgStatus.ACTIVE, 10_000, "voice", "realtime", 8_000),
    ("Loopwise Agents", OrgStatus.ACTIVE, 9_000, "agents", "realtime", 9_000),
    ("Cobalt Code", OrgStatus.ACTIVE, 8_000, "coding", "interactive", 6_000),
    ("Tessellate", OrgStatus.ACTIVE, 6_000, "agents", "interactive", 5_000),
    ("Harbor Health", OrgStatus.ACTIVE, 5_000, "chat", "interactive", 4_000),
    ("Quillstream", OrgStatus.ACTIVE, 4_000, "coding", "interactive", 3_000),
    ("Nimbus Support", OrgStatus.ACTIVE, 3_000, "chat", "interactive", 2_500),
    ("Driftwood AI", OrgStatus.SUSPENDED, 2_000, "agents", "interactive", 2_000),
    ("Kite Commerce", OrgStatus.SUSPENDED, 2_000, "chat", "tolerant", 1_500),
    ("Beacon Tutors", OrgStatus.APPROVED, 0, "chat", "interactive", 300),
    ("Sundial Games", OrgStatus.APPROVED, 0, "agents", "realtime", 450),
    ("Ferrous Robotics", OrgStatus.APPROVED, 0, "other", "realtime", 600),
    ("Marlin Legal", OrgStatus.IN_REVIEW, 0, "chat", "tolerant", 400),
    ("Orchard Analytics", OrgStatus.IN_REVIEW, 0, "batch", "none", 1_200),
    ("Plume Translate", OrgStatus.IN_REVIEW, 0, "voice", "realtime", 350),
    ("Granite Batch Co", OrgStatus.APPLIED, 0, "batch", "none", 3_000),
    ("Willow Notes", OrgStatus.APPLIED, 0, "coding", "interactive", 200),
    ("Spamfast", OrgStatus.REJECTED, 0, "other", "none", 5_000),
    ("Oldtown Chat", OrgStatus.OFFBOARDED, 0, "chat", "interactive", 800),
]


class Command(BaseCommand):
    help = "Load demo data (idempotent)."

    def add_arguments(self, parser):
        parser.add_argument("--credentials", default="",
                            help="Keep a gateway token and an Acme Voice API key in this file.")

    def handle(self, *args, credentials: str = "", **options):
        if not settings.DEBUG:
            # It makes a superuser and an owner whose password is printed in the README.
            raise CommandError("seed_demo makes accounts with a published password: it runs "
                               "only in development (SLUICE_DEBUG=1).")
        # No transaction around the whole: every step is a service that commits on its own.
        operator = self._user(OPERATOR_EMAIL, staff=True)
        owner = self._user(OWNER_EMAIL, staff=False)
        pool = self._pool()
        # First: its design partners are the ones its opened wave admits.
        seed_waitlist(pool=pool, operator=operator)
        created = 0
        for name, target, tps, *answers in ORGS:
            org, was_created = self._org(name, target, pool=pool, tps=tps, operator=operator,
                                         answers=answers)
            created += was_created
        acme = Organization.objects.get(slug="acme-voice")
        if not Membership.objects.filter(org=acme, user=owner).exists():
            services.membership_add(org=acme, user=owner, role=Role.OWNER, actor=ACTOR)
        # The demo owner can create keys at once: their address counts as confirmed.
        call_command("email_verified_mark", OWNER_EMAIL, stdout=self.stdout)
        self._extensions(pool=pool, operator=operator)
        if credentials:
            quickstart_credentials(path=Path(credentials), org=acme)
        self.stdout.write(f"Demo data ready ({created} new organizations).")

    def _extensions(self, *, pool, operator) -> None:
        """Seed data of the other domains, each idempotent on its own. Bookings first: last
        month's is a line of the invoice seed_usage closes."""
        seed_bookings(pool=pool)
        seed_usage(pool=pool, operator=operator, actor=ACTOR)

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
                                   queue_max_wait_ms=20_000, actor=ACTOR)  # requests may wait

    def _org(self, name: str, target: str, *, pool, tps: int, operator, answers
             ) -> tuple[Organization, bool]:
        org = Organization.objects.filter(name=name).first()
        if org is not None:
            return org, False
        org = services.org_create(name=name, actor=ACTOR)
        outcome, steps = PATHS[target]
        vet(_application(org, pool, *answers), outcome=outcome, pool=pool, operator=operator)
        for step in steps:
            STEP_SERVICES[step](org=org, actor=ACTOR)
            if step == "admit" and tps:  # granted while active, before a suspension
                self._allocation(org, pool, tps)
        return org, True

    def _allocation(self, org: Organization, pool: CapacityPool, tps: int) -> None:
        if Allocation.objects.filter(org=org, pool=pool, status=AllocationStatus.ACTIVE).exists():
            return
        allocation_grant(org=org, pool=pool, guaranteed_tps=tps, burst_tps=tps * 2,
                         daily_tokens=tps * 3_600 * 8, max_concurrency=max(tps // 250, 4),
                         actor=ACTOR)


def _application(org: Organization, pool: CapacityPool, use_case: str, latency: str,
                 peak: int):
    return application_submit(org=org, actor=ACTOR, data={
        "legal_name": f"{org.name} Inc.", "website": f"https://{org.slug}.example",
        "country": "US", "contact_name": f"{org.name} operations",
        "contact_email": f"ops@{org.slug}.example", "use_case": use_case,
        "use_case_description": f"{org.name}: {use_case} workloads.",
        "expected_peak_tps": peak, "expected_daily_tokens": peak * 40_000,
        "latency_sensitivity": latency, "preferred_region": pool.region,
    })


def quickstart_credentials(*, path: Path, org: Organization) -> dict:
    """{"gateway_token", "api_key"} kept in `path`, each made again when the database no longer
    knows it (a fresh database, a revoked key)."""
    kept = json.loads(path.read_text()) if path.exists() else {}
    token = kept.get("gateway_token", "")
    if not GatewayToken.objects.filter(lookup=_lookup(token), revoked_at=None).exists():
        token = gateway_token_create(name=QUICKSTART_GATEWAY_NAME, actor=ACTOR)[1]
    key = kept.get("api_key", "")
    if not ApiKey.objects.filter(org=org, lookup=_lookup(key), revoked_at=None).exists():
        key = api_key_create(org=org, name=QUICKSTART_KEY_NAME, actor=ACTOR)[1]
    kept = {"gateway_token": token, "api_key": key, "org": org.slug}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text(json.dumps(kept))
    return kept


def _lookup(secret: str) -> str:
    """`gw_<lookup>_<secret>` / `sk_<lookup>_<secret>` -> lookup."""
    parts = secret.split("_")
    return parts[1] if len(parts) >= 3 else "-"
