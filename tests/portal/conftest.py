import pytest
from django.test import Client

from orgs.models import Role
from portal.models import VerifiedEmail
from tests.factories import MembershipFactory, UserFactory


def portal_client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def verified(user):
    VerifiedEmail.objects.get_or_create(user=user, email=user.email)
    return user


@pytest.fixture
def orgs(two_orgs, redis_client):
    """two_orgs with Django test clients (pages, not the API) signed in as each owner."""
    a, b = two_orgs
    for side in (a, b):
        verified(side.owner)
        side.client = portal_client(side.owner)
    return a, b


@pytest.fixture
def viewer(orgs):
    a, _ = orgs
    user = UserFactory()
    MembershipFactory(org=a.org, user=user, role=Role.VIEWER)
    return user
