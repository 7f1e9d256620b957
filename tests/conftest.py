from dataclasses import dataclass

import pytest
import redis as redis_lib
from django.conf import settings
from rest_framework.test import APIClient

from orgs.models import Organization, Role
from tests.factories import MembershipFactory, OperatorFactory, OrganizationFactory, UserFactory


@dataclass
class OrgWithOwner:
    org: Organization
    owner: object
    client: APIClient


def _client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def operator(db):
    return OperatorFactory()


@pytest.fixture
def operator_client(operator) -> APIClient:
    return _client_for(operator)


@pytest.fixture
def anon_client() -> APIClient:
    return APIClient()


@pytest.fixture
def two_orgs(db) -> tuple[OrgWithOwner, OrgWithOwner]:
    """Two active orgs, each with an owner and a client signed in as that owner. Every
    org-scoped endpoint is tested with B's client against A's objects: the answer is 404."""
    result = []
    for name in ("Alpha", "Bravo"):
        org = OrganizationFactory(name=name, slug=name.lower())
        owner = UserFactory(username=f"owner@{name.lower()}.test")
        MembershipFactory(org=org, user=owner, role=Role.OWNER)
        result.append(OrgWithOwner(org=org, owner=owner, client=_client_for(owner)))
    return result[0], result[1]


@pytest.fixture
def redis_client():
    """The real Redis named by REDIS_URL, emptied before the test (tests own that database)."""
    client = redis_lib.Redis.from_url(settings.REDIS_URL)
    client.flushdb()
    yield client
    client.close()


@pytest.fixture
def published_limits(monkeypatch) -> list[int]:
    """Org ids whose limits were pushed to the admission engine after a commit, once per
    publish (the publish itself still runs, against the test's Redis)."""
    from quotas import publish

    published: list[int] = []
    flush = publish.limits_publish_orgs_now_or_queue

    def recorded(org_ids: set[int]) -> None:
        published.extend(sorted(org_ids))
        flush(org_ids)

    monkeypatch.setattr(publish, "limits_publish_orgs_now_or_queue", recorded)
    return published
