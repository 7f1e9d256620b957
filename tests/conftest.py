import sys
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path

import pytest
import redis as redis_lib
from django.conf import settings
from rest_framework.test import APIClient

from metering.partitions import usage_partitions_ensure
from orgs.models import Organization, Role
from portal.models import VerifiedEmail
from tests.factories import MembershipFactory, OperatorFactory, OrganizationFactory, UserFactory

# The Python client is its own package (clients/python): the tests of the client, of the
# gateway and of the hook's server use it from source.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "clients" / "python" / "src"))


@dataclass
class OrgWithOwner:
    org: Organization
    owner: object
    client: APIClient


def _client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def usage_partitions_for_tests() -> None:
    """A partition of usage events for every month from two years back to a year ahead: tests
    record events at fixed dates, and migrate made only this month's and the next few."""
    now = datetime.now(UTC)
    usage_partitions_ensure(now=now, since=date(now.year - 2, now.month, 1), months_ahead=12)


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    with django_db_blocker.unblock():
        usage_partitions_for_tests()


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
        # Owners have confirmed their address, as the portal's sign-up asks them to.
        VerifiedEmail.objects.create(user=owner, email=owner.email)
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


@pytest.fixture(scope="session")
def stripe_server(tmp_path_factory):
    """The local Stripe-compatible server (devstripe), one for the whole run."""
    from tests.billing.conftest import StripeServer

    server = StripeServer(data_dir=tmp_path_factory.mktemp("stripe"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def stripe(stripe_server, settings):
    """Production code pointed at the local Stripe, emptied for each test (and started again
    if a test stopped it to play an outage)."""
    from tests.billing.conftest import API_KEY, WEBHOOK_SECRET

    if stripe_server.process is None:
        stripe_server.start()
    stripe_server.call("DELETE", "/_config/reset")
    settings.STRIPE_API_KEY = API_KEY
    settings.STRIPE_API_BASE = stripe_server.url
    settings.STRIPE_WEBHOOK_SECRET = WEBHOOK_SECRET
    return stripe_server


@pytest.fixture(autouse=True)
def _served_connections_closed():
    """The served application's threads (tests/hook.py) close their database connections
    after each test that used them."""
    yield
    from tests.hook import served_connections_close

    served_connections_close()


@pytest.fixture(scope="session")
def served_http(django_db_setup, django_db_blocker):
    """The production application (config/asgi.py: the hook on its event loop, Django behind
    the bridge) over real HTTP in this process, for the whole run: what a gateway calls.
    Tests that use it commit their rows (transactional_db), as with live_server."""
    from tests.hook import served_connections_close, served_over_http

    server = served_over_http()
    yield server
    server.stop()
    served_connections_close()  # before the test database is dropped


@pytest.fixture
def served_url(served_http, transactional_db) -> str:
    return served_http.url


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A real 3-node Redis Cluster of private redis-servers (tests/private_redis.py), one per
    test module that asks for it."""
    from tests.private_redis import PrivateCluster

    started = PrivateCluster(tmp_path_factory.mktemp("cluster")).start()
    yield started
    started.stop()
