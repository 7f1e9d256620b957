import pytest

from orgs.models import Role
from rollout.models import QuotaRequest, QuotaRequestStatus
from rollout.quota_requests import quota_request_deny
from tests.factories import AllocationFactory
from tests.portal.conftest import portal_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def allocated(orgs):
    a, _ = orgs
    allocation = AllocationFactory(org=a.org, guaranteed_tps=10, burst_tps=20)
    return a, allocation


def _ask(client, slug, pool, **changes):
    data = {"pool": pool.pk, "guaranteed_tps": 500, "burst_tps": 900, "daily_tokens": 10**8,
            "max_concurrency": 50, "reason": "launching in Spain", **changes}
    return client.post(f"/portal/o/{slug}/quota-requests/new/", data)


def test_owner_asks_sees_the_reason_of_a_denial_and_cancels(allocated, operator):
    a, allocation = allocated
    assert _ask(a.client, a.org.slug, allocation.pool).status_code == 302
    request = QuotaRequest.objects.get(org=a.org)
    assert request.status == QuotaRequestStatus.PENDING
    page = a.client.get(f"/portal/o/{a.org.slug}/quota-requests/").content.decode()
    assert 'data-status="pending"' in page and "Cancel" in page
    a.client.post(f"/portal/o/{a.org.slug}/quota-requests/{request.pk}/cancel/")
    request.refresh_from_db()
    assert request.status == QuotaRequestStatus.CANCELLED
    _ask(a.client, a.org.slug, allocation.pool)
    quota_request_deny(request=QuotaRequest.objects.get(org=a.org, status="pending"),
                       actor=operator, reason="the pool is full until March")
    page = a.client.get(f"/portal/o/{a.org.slug}/quota-requests/").content.decode()
    assert "the pool is full until March" in page


def test_form_errors_and_service_conflicts_write_nothing(allocated):
    a, allocation = allocated
    response = _ask(a.client, a.org.slug, allocation.pool, burst_tps=100, daily_tokens=0)
    assert response.status_code == 400
    assert set(response.context["form"].errors) == {"burst_tps", "daily_tokens"}
    assert not QuotaRequest.objects.exists()
    _ask(a.client, a.org.slug, allocation.pool)
    again = _ask(a.client, a.org.slug, allocation.pool)
    assert again.status_code == 409 and "already a pending request" in again.content.decode()
    assert QuotaRequest.objects.count() == 1


@pytest.mark.parametrize("role", [Role.DEVELOPER, Role.VIEWER, Role.BILLING])
def test_other_roles_read_but_cannot_ask_or_cancel(allocated, role):
    from tests.factories import MembershipFactory, UserFactory
    a, allocation = allocated
    _ask(a.client, a.org.slug, allocation.pool)
    user = UserFactory()
    MembershipFactory(org=a.org, user=user, role=role)
    client = portal_client(user)
    page = client.get(f"/portal/o/{a.org.slug}/quota-requests/")
    assert page.status_code == 200 and "New request" not in page.content.decode()
    assert _ask(client, a.org.slug, allocation.pool, burst_tps=901).status_code == 403
    request = QuotaRequest.objects.get()
    assert client.post(
        f"/portal/o/{a.org.slug}/quota-requests/{request.pk}/cancel/").status_code == 403
    request.refresh_from_db()
    assert request.status == QuotaRequestStatus.PENDING


def test_other_org_gets_404(allocated, orgs):
    a, allocation = allocated
    _, b = orgs
    _ask(a.client, a.org.slug, allocation.pool)
    request = QuotaRequest.objects.get()
    assert b.client.get(f"/portal/o/{a.org.slug}/quota-requests/").status_code == 404
    assert _ask(b.client, a.org.slug, allocation.pool).status_code == 404
    for slug in (a.org.slug, b.org.slug):
        assert b.client.post(
            f"/portal/o/{slug}/quota-requests/{request.pk}/cancel/").status_code == 404
    request.refresh_from_db()
    assert request.status == QuotaRequestStatus.PENDING


@pytest.mark.parametrize("rows", [1, 5])
def test_list_queries_do_not_grow(allocated, operator, rows, django_assert_num_queries):
    a, allocation = allocated
    for _ in range(rows):
        _ask(a.client, a.org.slug, allocation.pool)
        quota_request_deny(request=QuotaRequest.objects.get(status="pending"), actor=operator,
                           reason="no")
    a.client.get(f"/portal/o/{a.org.slug}/quota-requests/")
    with django_assert_num_queries(7):
        assert a.client.get(f"/portal/o/{a.org.slug}/quota-requests/").status_code == 200
