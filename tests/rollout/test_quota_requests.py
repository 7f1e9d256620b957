import threading
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from orgs.models import AuditEvent, Role
from quotas.models import Allocation
from quotas.selectors import pool_guaranteed_tps
from rollout.models import PoolAdmission, QuotaRequest
from rollout.quota_requests import quota_request_approve, quota_request_create
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


def rules(pool, **overrides) -> PoolAdmission:
    """Auto-approval rules generous on every dimension unless overridden."""
    values = {"quota_auto_approve_max_tps": 1_000, "quota_auto_approve_max_burst_tps": 1_000,
              "quota_auto_approve_max_daily_tokens": 10**8,
              "quota_auto_approve_max_concurrency": 10, "quota_auto_approve_window_days": 30}
    return PoolAdmission.objects.create(pool=pool, **(values | overrides))


def test_small_increase_within_every_rule_is_auto_approved(two_orgs):
    a, _ = two_orgs
    allocation = AllocationFactory(org=a.org, guaranteed_tps=1_000, burst_tps=2_000)
    rules(allocation.pool)
    small = ask(a.client, a.org, allocation.pool).json()
    assert (small["status"], small["decided_by"]) == ("approved", "auto:quota_headroom")
    big = ask(a.client, a.org, allocation.pool, guaranteed_tps=5_000, burst_tps=5_000).json()
    assert big["status"] == "pending"


def test_growth_in_dimensions_the_rules_do_not_allow_waits_for_an_operator(two_orgs):
    """The reported hole: a rule on the guarantee only, and a request that keeps the guarantee
    but asks the whole pool as burst, a huge daily quota and a huge concurrency."""
    a, _ = two_orgs
    pool = PoolFactory(capacity_tps=121_000)
    AllocationFactory(org=a.org, pool=pool, guaranteed_tps=1_000, burst_tps=2_000)
    PoolAdmission.objects.create(pool=pool, quota_auto_approve_max_tps=500)
    response = ask(a.client, a.org, pool, guaranteed_tps=1_000, burst_tps=121_000,
                   daily_tokens=10**12, max_concurrency=100_000)
    assert response.status_code == 201
    assert (response.json()["status"], response.json()["decided_by"]) == ("pending", "")
    allocation = Allocation.objects.get(org=a.org, pool=pool)
    assert (allocation.burst_tps, allocation.daily_tokens, allocation.max_concurrency) == (
        2_000, 50_000_000, 20)


# The allocation grows from (1,000 / 2,000 TPS, 50M tokens, 20 concurrent); each rule allows
# exactly `allowed` more of its dimension.
EDGES = [("guaranteed_tps", "quota_auto_approve_max_tps", 1_000, 300),
         ("burst_tps", "quota_auto_approve_max_burst_tps", 2_000, 700),
         ("daily_tokens", "quota_auto_approve_max_daily_tokens", 50_000_000, 10**6),
         ("max_concurrency", "quota_auto_approve_max_concurrency", 20, 5)]


@pytest.mark.parametrize("dimension, rule, current, allowed", EDGES)
@pytest.mark.parametrize("over, status", [(0, "approved"), (1, "pending")])
def test_each_dimension_is_bounded_by_its_rule_at_both_edges(two_orgs, dimension, rule,
                                                             current, allowed, over, status):
    a, _ = two_orgs
    allocation = AllocationFactory(org=a.org, guaranteed_tps=1_000, burst_tps=2_000,
                                   daily_tokens=50_000_000, max_concurrency=20)
    rules(allocation.pool, **({r: 0 for _, r, _, _ in EDGES} | {rule: allowed}))
    unchanged = {"guaranteed_tps": 1_000, "burst_tps": 2_000, "daily_tokens": 50_000_000,
                 "max_concurrency": 20}
    body = unchanged | {dimension: current + allowed + over}
    assert ask(a.client, a.org, allocation.pool, **body).json()["status"] == status


def test_requests_within_the_window_count_together(two_orgs):
    a, _ = two_orgs
    allocation = AllocationFactory(org=a.org, guaranteed_tps=1_000, burst_tps=2_000)
    rules(allocation.pool, quota_auto_approve_max_tps=500, quota_auto_approve_window_days=7)
    limits = {"burst_tps": 2_000, "daily_tokens": 50_000_000, "max_concurrency": 20}
    first = ask(a.client, a.org, allocation.pool, guaranteed_tps=1_300, **limits).json()
    assert first["status"] == "approved"
    second = ask(a.client, a.org, allocation.pool, guaranteed_tps=1_600, **limits).json()
    assert second["status"] == "pending"  # 300 + 300 > 500
    a.client.post(f"/api/v1/orgs/{a.org.pk}/quota-requests/{second['id']}/cancel/")
    assert ask(a.client, a.org, allocation.pool, guaranteed_tps=1_500, **limits
               ).json()["status"] == "approved"  # 300 + 200 = 500: exactly at the rule
    # Once the earlier approvals leave the window, the org may grow again.
    QuotaRequest.objects.filter(status="approved").update(
        decided_at=timezone.now() - timedelta(days=7, seconds=1))
    assert ask(a.client, a.org, allocation.pool, guaranteed_tps=2_000, **limits
               ).json()["status"] == "approved"


def test_auto_approval_never_grants_a_first_allocation_in_a_pool(two_orgs):
    """A pool where the org holds nothing is reached through its waitlist, not a request."""
    a, _ = two_orgs
    pool = PoolFactory()
    rules(pool, quota_auto_approve_max_tps=5_000, quota_auto_approve_max_burst_tps=5_000)
    response = ask(a.client, a.org, pool, guaranteed_tps=100, burst_tps=100,
                   daily_tokens=1_000, max_concurrency=1)
    assert response.json()["status"] == "pending"
    assert not Allocation.objects.filter(org=a.org, pool=pool).exists()


@pytest.mark.parametrize("field, value", [
    ("guaranteed_tps", 10_000_001), ("burst_tps", 10_000_001), ("daily_tokens", 10**12 + 1),
    ("daily_tokens", 10**15), ("max_concurrency", 100_001)])
def test_absurd_values_are_refused_before_any_rule(two_orgs, field, value):
    a, _ = two_orgs
    allocation = AllocationFactory(org=a.org)
    rules(allocation.pool)
    response = ask(a.client, a.org, allocation.pool, **{field: value})
    assert response.status_code == 400
    assert field in response.json()["error"]["fields"]
    assert not QuotaRequest.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_concurrent_requests_of_one_org_never_grow_past_the_rule():
    """Ten requests of one org in one pool at once, each within the rule on its own: whatever
    order they are decided in, auto-approval lets the guarantee grow by at most the rule,
    summed over the window (the rest wait for an operator, or find one already waiting)."""
    allocation = AllocationFactory(guaranteed_tps=1_000, burst_tps=5_000)
    rules(allocation.pool, quota_auto_approve_max_tps=500)
    barrier = threading.Barrier(10)
    outcomes = []

    def request(step: int):
        barrier.wait()
        try:
            created = quota_request_create(
                org=allocation.org, pool=allocation.pool, guaranteed_tps=1_000 + 100 * step,
                burst_tps=5_000, daily_tokens=50_000_000, max_concurrency=20, reason="more",
                actor="test")
            outcomes.append(created.status)
        except Conflict as error:
            outcomes.append(error.code)
        finally:
            connection.close()

    threads = [threading.Thread(target=request, args=(step,)) for step in [*range(1, 6)] * 2]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(outcomes) == 10
    grown = sum(max(r.guaranteed_tps - r.previous_limits["guaranteed_tps"], 0)
                for r in QuotaRequest.objects.filter(status="approved"))
    allocation.refresh_from_db()
    assert grown <= 500
    assert allocation.guaranteed_tps <= 1_500
    assert "approved" in outcomes  # the first decided always fits
    assert set(outcomes) <= {"approved", "pending", "quota_request_pending"}
    assert QuotaRequest.objects.filter(status="pending").count() <= 1


def test_operators_set_the_rules_over_the_api(operator_client, operator):
    pool = PoolFactory()
    url = f"/api/v1/operator/pools/{pool.pk}/quota-auto-approval/"
    assert operator_client.get(url).json() == {
        "quota_auto_approve_max_tps": 0, "quota_auto_approve_max_burst_tps": 0,
        "quota_auto_approve_max_daily_tokens": 0, "quota_auto_approve_max_concurrency": 0,
        "quota_auto_approve_window_days": 30}
    body = {"quota_auto_approve_max_tps": 100, "quota_auto_approve_max_burst_tps": 200,
            "quota_auto_approve_max_daily_tokens": 10**6,
            "quota_auto_approve_max_concurrency": 2, "quota_auto_approve_window_days": 14}
    assert operator_client.put(url, body, format="json").json() == body
    assert AuditEvent.objects.filter(action="pool.quota_auto_approve_set").count() == 1
    bad = operator_client.put(url, body | {"quota_auto_approve_window_days": 0}, format="json")
    assert bad.status_code == 400
    assert "quota_auto_approve_window_days" in bad.json()["error"]["fields"]
    assert PoolAdmission.objects.get(pool=pool).quota_auto_approve_window_days == 14


def test_an_org_owner_cannot_set_the_rules(two_orgs):
    a, _ = two_orgs
    pool = PoolFactory()
    response = a.client.put(f"/api/v1/operator/pools/{pool.pk}/quota-auto-approval/",
                            {"quota_auto_approve_max_tps": 10**6}, format="json")
    assert response.status_code == 403
    assert not PoolAdmission.objects.exists()


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
