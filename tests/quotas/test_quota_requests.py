import threading
from decimal import Decimal

import pytest
from django.db import connection
from rest_framework.test import APIClient

from orgs.models import AuditEvent, Role
from quotas.models import Allocation, PoolAdmission, QuotaRequest
from quotas.quota_requests import quota_request_approve, quota_request_create
from quotas.selectors import pool_guaranteed_tps
from sluice.errors import Conflict
from tests.factories import (
    AllocationFactory,
    MembershipFactory,
    OperatorFactory,
    OrganizationFactory,
    PoolFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db


def ask(client, org, pool, /, **overrides):
    body = {"pool": pool.pk, "guaranteed_tps": 2_000, "burst_tps": 3_000,
            "daily_tokens": 50_000_000, "max_concurrency": 30, "reason": "launch next week"}
    return client.post(f"/api/v1/orgs/{org.pk}/quota-requests/", body | overrides,
                       format="json")


def test_org_asks_operator_approves_and_the_allocation_changes(two_orgs, operator_client):
    a, _ = two_orgs
    allocation = AllocationFactory(org=a.org, guaranteed_tps=1_000, burst_tps=2_000)
    response = ask(a.client, a.org, allocation.pool)
    assert response.status_code == 201
    assert response.json()["status"] == "pending"
    inbox = operator_client.get("/api/v1/operator/quota-requests/?status=pending").json()
    assert [r["id"] for r in inbox["results"]] == [response.json()["id"]]
    approved = operator_client.post(
        f"/api/v1/operator/quota-requests/{response.json()['id']}/approve/", {}, format="json")
    assert approved.status_code == 200
    assert approved.json()["status"] == "approved"
    allocation.refresh_from_db()
    assert (allocation.guaranteed_tps, allocation.burst_tps, allocation.max_concurrency) == (
        2_000, 3_000, 30)
    assert AuditEvent.objects.filter(action="quota_request.approved", org=a.org).exists()


def test_approval_beyond_capacity_is_422_and_stays_pending(two_orgs, operator_client):
    a, _ = two_orgs
    pool = PoolFactory(capacity_tps=2_000, guaranteeable_ratio=Decimal("1"))
    AllocationFactory(org=a.org, pool=pool, guaranteed_tps=1_000, burst_tps=1_000)
    AllocationFactory(pool=pool, guaranteed_tps=900, burst_tps=900)
    request_id = ask(a.client, a.org, pool, burst_tps=2_000).json()["id"]
    response = operator_client.post(f"/api/v1/operator/quota-requests/{request_id}/approve/",
                                    {}, format="json")
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "capacity_exhausted"
    assert QuotaRequest.objects.get(pk=request_id).status == "pending"
    assert Allocation.objects.get(org=a.org).guaranteed_tps == 1_000


def test_first_request_in_a_pool_grants_an_allocation(two_orgs, operator_client):
    a, _ = two_orgs
    pool = PoolFactory()
    request_id = ask(a.client, a.org, pool).json()["id"]
    operator_client.post(f"/api/v1/operator/quota-requests/{request_id}/approve/", {},
                         format="json")
    assert Allocation.objects.get(org=a.org, pool=pool).guaranteed_tps == 2_000


def test_deny_needs_a_reason_the_org_can_read(two_orgs, operator_client):
    a, _ = two_orgs
    request_id = ask(a.client, a.org, PoolFactory()).json()["id"]
    url = f"/api/v1/operator/quota-requests/{request_id}/deny/"
    assert operator_client.post(url, {}, format="json").status_code == 400
    assert operator_client.post(url, {"reason": "pool is full until the July wave"},
                                format="json").status_code == 200
    mine = a.client.get(f"/api/v1/orgs/{a.org.pk}/quota-requests/").json()["results"][0]
    assert (mine["status"], mine["decision_reason"]) == ("denied",
                                                         "pool is full until the July wave")
    again = operator_client.post(f"/api/v1/operator/quota-requests/{request_id}/approve/", {},
                                 format="json")
    assert again.status_code == 409


def test_one_pending_request_per_pool_and_cancel(two_orgs):
    a, _ = two_orgs
    pool = PoolFactory()
    first = ask(a.client, a.org, pool)
    second = ask(a.client, a.org, pool)
    assert second.status_code == 409
    assert second.json()["error"]["code"] == "quota_request_pending"
    cancel = a.client.post(f"/api/v1/orgs/{a.org.pk}/quota-requests/{first.json()['id']}/"
                           "cancel/")
    assert cancel.json()["status"] == "cancelled"
    assert ask(a.client, a.org, pool).status_code == 201


@pytest.mark.parametrize("overrides, field", [
    ({"burst_tps": 10}, "burst_tps"), ({"guaranteed_tps": 0}, "guaranteed_tps"),
    ({"reason": ""}, "reason"), ({"pool": 10**9}, "pool")])
def test_malformed_request_is_400_and_writes_nothing(two_orgs, overrides, field):
    a, _ = two_orgs
    response = ask(a.client, a.org, PoolFactory(), **overrides)
    assert response.status_code == 400
    assert field in response.json()["error"]["fields"]
    assert not QuotaRequest.objects.exists()


def test_small_increase_within_headroom_is_auto_approved(two_orgs):
    a, _ = two_orgs
    allocation = AllocationFactory(org=a.org, guaranteed_tps=1_000, burst_tps=2_000)
    PoolAdmission.objects.create(pool=allocation.pool, quota_auto_approve_max_tps=1_000)
    small = ask(a.client, a.org, allocation.pool).json()
    assert (small["status"], small["decided_by"]) == ("approved", "auto:quota_headroom")
    big = ask(a.client, a.org, allocation.pool, guaranteed_tps=5_000, burst_tps=5_000).json()
    assert big["status"] == "pending"


def test_viewers_cannot_ask_and_other_orgs_get_404(two_orgs):
    a, b = two_orgs
    viewer = UserFactory()
    MembershipFactory(org=a.org, user=viewer, role=Role.VIEWER)
    client = APIClient()
    client.force_authenticate(viewer)
    assert ask(client, a.org, PoolFactory()).status_code == 403
    request_id = ask(a.client, a.org, PoolFactory()).json()["id"]
    assert b.client.get(f"/api/v1/orgs/{a.org.pk}/quota-requests/").status_code == 404
    assert b.client.post(f"/api/v1/orgs/{a.org.pk}/quota-requests/{request_id}/cancel/"
                         ).status_code == 404
    assert b.client.get("/api/v1/operator/quota-requests/").status_code == 403


@pytest.mark.django_db(transaction=True)
def test_concurrent_approvals_never_overcommit():
    pool = PoolFactory(capacity_tps=10_000, guaranteeable_ratio=Decimal("1"))
    requests = []
    for _ in range(8):
        org = OrganizationFactory()
        requests.append(quota_request_create(
            org=org, pool=pool, guaranteed_tps=3_000, burst_tps=3_000, daily_tokens=1,
            max_concurrency=1, reason="more", actor="test"))
    operator = OperatorFactory()
    barrier = threading.Barrier(len(requests))
    outcomes = []

    def approve(r):
        barrier.wait()
        try:
            quota_request_approve(request=r, actor=operator)
            outcomes.append("approved")
        except Conflict:
            outcomes.append("conflict")
        except Exception as exc:  # CapacityExhausted, asserted below by name
            outcomes.append(type(exc).__name__)
        finally:
            connection.close()

    threads = [threading.Thread(target=approve, args=(r,)) for r in requests]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["CapacityExhausted"] * 5 + ["approved"] * 3
    assert pool_guaranteed_tps(pool=pool) == 9_000
