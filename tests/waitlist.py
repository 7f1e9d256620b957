"""Helpers for the waitlist tests: build applications through the real services."""

from orgs.models import Membership, OrgStatus, Role
from portal.models import VerifiedEmail
from rollout.applications import application_check_set, application_decide, application_submit
from rollout.models import Application, CheckItem
from tests.factories import OrganizationFactory, UserFactory


def application_data(**overrides) -> dict:
    data = {
        "legal_name": "Acme Voice GmbH",
        "website": "https://acme.example",
        "country": "DE",
        "contact_name": "Ada Contact",
        "contact_email": "ada@acme.example",
        "use_case": "voice",
        "use_case_description": "Real-time voice agent for call centres.",
        "expected_peak_tps": 400,
        "expected_daily_tokens": 30_000_000,
        "latency_sensitivity": "realtime",
        "preferred_region": "us-east",
    }
    data.update(overrides)
    return data


def applicant_org(name: str = "Acme"):
    """A new org (status applied) with an owner who has an email address."""
    org = OrganizationFactory(name=name, status=OrgStatus.APPLIED)
    owner = UserFactory(email=f"owner@{org.slug}.test")
    Membership.objects.create(org=org, user=owner, role=Role.OWNER)
    VerifiedEmail.objects.create(user=owner, email=owner.email)
    return org, owner


def submit(org, actor, **overrides) -> Application:
    return application_submit(org=org, data=application_data(**overrides), actor=actor)


def tick_required(app: Application, operator) -> None:
    for item in (CheckItem.IDENTITY_VERIFIED, CheckItem.USE_CASE_ACCEPTABLE,
                 CheckItem.CONTACT_REACHABLE):
        application_check_set(application=app, item=item, done=True, actor=operator)


def approved_application(operator, pool, name: str = "Acme", **overrides) -> Application:
    org, owner = applicant_org(name)
    app = submit(org, owner, **overrides)
    tick_required(app, operator)
    return application_decide(application=app, decision="approve", reason="fits",
                              actor=operator, pool_id=pool.pk)
