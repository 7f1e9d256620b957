from datetime import timedelta
from decimal import Decimal

import factory
from django.contrib.auth import get_user_model
from django.utils import timezone

from orgs.models import Membership, Organization, OrgStatus, Role
from quotas.models import Allocation, CapacityPool
from rollout.models import Application, LatencySensitivity, RolloutWave, UseCase

PASSWORD = "correct-horse-battery"


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}@example.com")
    email = factory.SelfAttribute("username")
    password = factory.django.Password(PASSWORD)


class OperatorFactory(UserFactory):
    username = factory.Sequence(lambda n: f"operator{n}@sluice.dev")
    is_staff = True
    is_superuser = True


class OrganizationFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Organization

    name = factory.Sequence(lambda n: f"Org {n}")
    slug = factory.Sequence(lambda n: f"org-{n}")
    status = OrgStatus.ACTIVE


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    org = factory.SubFactory(OrganizationFactory)
    role = Role.OWNER


class PoolFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = CapacityPool

    model = factory.Sequence(lambda n: f"model-{n}")
    region = "us-east"
    tier = "fast"
    capacity_tps = 10_000
    guaranteeable_ratio = Decimal("0.900")


class AllocationFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Allocation

    org = factory.SubFactory(OrganizationFactory)
    pool = factory.SubFactory(PoolFactory)
    guaranteed_tps = 1_000
    burst_tps = 2_000
    daily_tokens = 50_000_000
    max_concurrency = 20


class ApplicationFactory(factory.django.DjangoModelFactory):
    """A bare application row (no checklist rows, no audit): for reads. Tests of the vetting
    flow go through rollout.applications.application_submit instead."""

    class Meta:
        model = Application

    org = factory.SubFactory(OrganizationFactory, status=OrgStatus.APPLIED)
    legal_name = factory.LazyAttribute(lambda o: f"{o.org.name} Inc.")
    website = "https://example.com"
    country = "DE"
    contact_name = "Ada Contact"
    contact_email = factory.Sequence(lambda n: f"contact{n}@example.com")
    use_case = UseCase.CHAT
    use_case_description = "A chat assistant for our customers."
    expected_peak_tps = 500
    expected_daily_tokens = 20_000_000
    latency_sensitivity = LatencySensitivity.INTERACTIVE
    preferred_region = "us-east"


class RolloutWaveFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = RolloutWave

    pool = factory.SubFactory(PoolFactory)
    name = factory.Sequence(lambda n: f"Wave {n}")
    opens_at = factory.LazyFunction(lambda: timezone.now() + timedelta(days=7))
    capacity_tps = 5_000
    max_orgs = 10
    guaranteed_tps = 500
    burst_tps = 1_000
    daily_tokens = 50_000_000
    max_concurrency = 16
