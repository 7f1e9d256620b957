from decimal import Decimal

import factory
from django.contrib.auth import get_user_model

from orgs.models import Membership, Organization, OrgStatus, Role
from quotas.models import Allocation, CapacityPool

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
