from decimal import Decimal

import pytest

from orgs.models import AuditEvent, OrgStatus
from quotas.models import Allocation, CapacityPool
from tests.factories import AllocationFactory, OrganizationFactory, PoolFactory

pytestmark = pytest.mark.django_db


def grant_body(org, pool, /, **overrides):
    body = {"org": org.pk, "pool": pool.pk, "guaranteed_tps": 1_000, "burst_tps": 2_000,
            "daily_tokens": 10_000_000, "max_concurrency": 8}
    return body | overrides


def test_grant_beyond_capacity_says_how_much_is_left(operator_client):
    pool = PoolFactory(capacity_tps=10_000, guaranteeable_ratio=Decimal("0.5"))
    AllocationFactory(pool=pool, guaranteed_tps=4_000, burst_tps=4_000)
    org = OrganizationFactory()
    response = operator_client.post("/api/v1/allocations/",
                                    grant_body(org, pool, guaranteed_tps=1_500), format="json")
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "capacity_exhausted"
    assert error["details"]["free_tps"] == 1_000
    assert "1000 of 5000" in error["message"]
    assert not Allocation.objects.filter(org=org).exists()


def test_grant_then_summary(operator_client):
    pool = PoolFactory(capacity_tps=10_000)
    org = OrganizationFactory()
    response = operator_client.post("/api/v1/allocations/", grant_body(org, pool), format="json")
    assert response.status_code == 201, response.json()
    summary = operator_client.get(f"/api/v1/pools/{pool.pk}/").json()
    assert summary == {"pool_id": pool.pk, "name": str(pool), "capacity_tps": 10_000,
                       "guaranteeable_tps": 9_000, "guaranteed_tps": 1_000, "free_tps": 8_000,
                       "org_count": 1}
    assert AuditEvent.objects.filter(action="allocation.grant", org=org).count() == 1


@pytest.mark.parametrize("overrides, field", [
    ({"burst_tps": 500}, "burst_tps"),
    ({"guaranteed_tps": 0}, "guaranteed_tps"),
    ({"daily_tokens": -1}, "daily_tokens"),
    ({"max_concurrency": "many"}, "max_concurrency"),
    ({"pool": 999_999}, "pool"),
])
def test_malformed_grant_is_400_and_writes_nothing(operator_client, overrides, field):
    pool, org = PoolFactory(), OrganizationFactory()
    response = operator_client.post("/api/v1/allocations/", grant_body(org, pool, **overrides),
                                    format="json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_input"
    assert field in response.json()["error"]["fields"]
    assert not Allocation.objects.exists()
    assert not AuditEvent.objects.exists()


def test_grant_for_waitlisted_org_is_refused(operator_client):
    pool, org = PoolFactory(), OrganizationFactory(status=OrgStatus.APPLIED)
    response = operator_client.post("/api/v1/allocations/", grant_body(org, pool), format="json")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "org_not_eligible"


def test_lowering_capacity_below_guarantees_is_refused(operator_client):
    pool = PoolFactory(capacity_tps=10_000, guaranteeable_ratio=Decimal("0.9"))
    AllocationFactory(pool=pool, guaranteed_tps=6_000, burst_tps=6_000)
    response = operator_client.post(f"/api/v1/pools/{pool.pk}/capacity/",
                                    {"capacity_tps": 6_000}, format="json")
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "capacity_below_guarantees"
    assert error["details"]["excess_tps"] == 6_000 - 5_400
    pool.refresh_from_db()
    assert pool.capacity_tps == 10_000


def test_raising_a_guarantee_checks_capacity_but_lowering_does_not(operator_client):
    pool = PoolFactory(capacity_tps=1_000, guaranteeable_ratio=Decimal("1"))
    allocation = AllocationFactory(pool=pool, guaranteed_tps=900, burst_tps=900)
    url = f"/api/v1/allocations/{allocation.pk}/"
    too_much = operator_client.patch(url, {"guaranteed_tps": 1_001, "burst_tps": 1_001},
                                     format="json")
    assert too_much.status_code in (400, 422)
    ok = operator_client.patch(url, {"guaranteed_tps": 500}, format="json")
    assert ok.status_code == 200
    assert ok.json()["guaranteed_tps"] == 500


def test_ending_an_allocation_frees_its_capacity(operator_client):
    pool = PoolFactory(capacity_tps=1_000, guaranteeable_ratio=Decimal("1"))
    allocation = AllocationFactory(pool=pool, guaranteed_tps=1_000, burst_tps=1_000)
    assert operator_client.post(f"/api/v1/allocations/{allocation.pk}/end/", {},
                                format="json").status_code == 200
    other = OrganizationFactory()
    response = operator_client.post("/api/v1/allocations/",
                                    grant_body(other, pool, guaranteed_tps=1_000,
                                               burst_tps=1_000), format="json")
    assert response.status_code == 201


def test_pool_create_and_list(operator_client, django_assert_num_queries):
    response = operator_client.post("/api/v1/pools/", {
        "model": "gpt-5.6-sol", "region": "eu-west", "capacity_tps": 50_000,
        "guaranteeable_ratio": "0.8"}, format="json")
    assert response.status_code == 201
    assert response.json()["guaranteeable_tps"] == 40_000
    for _ in range(5):
        AllocationFactory()
    with django_assert_num_queries(1):
        listing = operator_client.get("/api/v1/pools/")
    assert len(listing.json()) == CapacityPool.objects.count()


def test_a_pool_is_created_with_its_lease_ttl_within_its_range(operator_client):
    body = {"model": "m-lease", "region": "eu-west", "capacity_tps": 1_000,
            "guaranteeable_ratio": "0.8"}
    response = operator_client.post("/api/v1/pools/", body, format="json")
    assert response.json()["lease_ttl_seconds"] == 15
    for refused in (5, 601, "x"):
        response = operator_client.post("/api/v1/pools/", {
            **body, "region": "us", "lease_ttl_seconds": refused}, format="json")
        assert response.status_code == 400
        assert "lease_ttl_seconds" in response.json()["error"]["fields"]
    response = operator_client.post("/api/v1/pools/", {
        **body, "region": "us", "lease_ttl_seconds": 60}, format="json")
    assert response.status_code == 201 and response.json()["lease_ttl_seconds"] == 60


def test_members_cannot_manage_pools(two_orgs):
    a, _ = two_orgs
    assert a.client.get("/api/v1/pools/").status_code == 403
    response = a.client.post("/api/v1/pools/", {"model": "m", "region": "r",
                                                "capacity_tps": 1, "guaranteeable_ratio": "1"},
                             format="json")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "operator_permission_required"


def test_raising_a_guarantee_reports_the_increase_and_what_is_free(operator_client):
    pool = PoolFactory(capacity_tps=2_000, guaranteeable_ratio=Decimal("1"))
    allocation = AllocationFactory(pool=pool, guaranteed_tps=200, burst_tps=2_000)
    AllocationFactory(pool=pool, guaranteed_tps=1_500, burst_tps=1_500)
    response = operator_client.patch(f"/api/v1/allocations/{allocation.pk}/",
                                     {"guaranteed_tps": 1_500}, format="json")
    assert response.status_code == 422
    error = response.json()["error"]
    assert (error["details"]["asked_tps"], error["details"]["free_tps"]) == (1_300, 300)
    assert "cannot guarantee 1300 more tokens/s: 300 of 2000" in error["message"]


def test_expired_allocations_are_ended_by_the_beat_task_once():
    from datetime import timedelta

    from django.utils import timezone

    from quotas.services import allocations_expire
    from quotas.tasks import allocations_expire as allocations_expire_task

    past = AllocationFactory(valid_from=timezone.now() - timedelta(days=2),
                             valid_until=timezone.now() - timedelta(hours=1))
    current = AllocationFactory(valid_until=timezone.now() + timedelta(days=1))
    assert allocations_expire_task.delay().get() == 1
    past.refresh_from_db()
    current.refresh_from_db()
    assert (past.status, current.status) == ("ended", "active")
    assert AuditEvent.objects.filter(action="allocation.end", org=past.org).count() == 1
    assert allocations_expire() == 0
