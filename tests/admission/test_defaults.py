"""The default wait budgets, set by an org's owners (REST API, portal), reach the queue's Redis
hash with the org's limits; bad values are refused and nothing changes."""

import pytest

from admission.engine.queue import QKEY, queue_key
from quotas.limiter.connection import limiter_client, limiter_reset
from tests.quotas.conftest import tenant_create

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def fresh(redis_client):
    limiter_reset()
    yield
    limiter_reset()


def defaults(pool_id: int) -> dict:
    return limiter_client().hgetall(queue_key(pool_id, QKEY.defaults))


def test_an_owner_sets_the_orgs_and_a_keys_default_and_the_engine_gets_them(fresh, two_orgs):
    alpha, _ = two_orgs
    t = tenant_create(org=alpha.org, guaranteed_tps=100, burst_tps=100)
    r = alpha.client.patch(f"/api/v1/orgs/{alpha.org.pk}/", {"queue_threshold_default_ms": 2000},
                           format="json")
    assert r.status_code == 200 and r.json()["queue_threshold_default_ms"] == 2000
    r = alpha.client.put(f"/api/v1/orgs/{alpha.org.pk}/api-keys/{t.key.pk}/limits/",
                         {"queue_threshold_default_ms": 500}, format="json")
    assert r.status_code == 200 and r.json()["queue_threshold_default_ms"] == 500
    assert defaults(t.pool.pk) == {f"o:{alpha.org.pk}": "2000", f"k:{t.key.pk}": "500"}
    r = alpha.client.put(f"/api/v1/orgs/{alpha.org.pk}/api-keys/{t.key.pk}/limits/", {},
                         format="json")
    assert r.status_code == 200 and r.json()["queue_threshold_default_ms"] is None
    assert defaults(t.pool.pk) == {f"o:{alpha.org.pk}": "2000"}


@pytest.mark.parametrize("value", [-1, 1, 49, 20_001])
def test_a_bad_default_is_refused_and_nothing_changes(fresh, two_orgs, value):
    alpha, _ = two_orgs
    t = tenant_create(org=alpha.org, guaranteed_tps=100, burst_tps=100)
    r = alpha.client.patch(f"/api/v1/orgs/{alpha.org.pk}/", {"queue_threshold_default_ms": value},
                           format="json")
    assert r.status_code in (400, 422), r.json()
    assert "queue_threshold_default_ms" in r.json()["error"]["fields"]
    r = alpha.client.put(f"/api/v1/orgs/{alpha.org.pk}/api-keys/{t.key.pk}/limits/",
                         {"queue_threshold_default_ms": value}, format="json")
    assert r.status_code in (400, 422)
    alpha.org.refresh_from_db()
    t.key.refresh_from_db()
    assert alpha.org.queue_threshold_default_ms is None
    assert t.key.queue_threshold_default_ms is None
    assert defaults(t.pool.pk) == {}


def test_another_orgs_owner_cannot_set_it(fresh, two_orgs):
    alpha, bravo = two_orgs
    r = bravo.client.patch(f"/api/v1/orgs/{alpha.org.pk}/", {"queue_threshold_default_ms": 100},
                           format="json")
    assert r.status_code == 404


def test_the_portal_sets_the_orgs_default_and_refuses_a_bad_one(fresh, two_orgs):
    from tests.portal.conftest import portal_client, verified

    alpha, _ = two_orgs
    client = portal_client(verified(alpha.owner))
    url = f"/portal/o/{alpha.org.slug}/keys/queue-default/"
    page = client.get(f"/portal/o/{alpha.org.slug}/keys/").content.decode()
    assert "Waiting for capacity" in page
    r = client.post(url, {"queue_threshold_default_ms": "25"})
    assert r.status_code in (400, 422)
    alpha.org.refresh_from_db()
    assert alpha.org.queue_threshold_default_ms is None
    r = client.post(url, {"queue_threshold_default_ms": "3000"})
    assert r.status_code == 302
    alpha.org.refresh_from_db()
    assert alpha.org.queue_threshold_default_ms == 3000
