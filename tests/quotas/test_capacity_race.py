"""The capacity invariant under real concurrency: 50 threads, each its own PostgreSQL
connection, all granting at once through the REST API."""

import threading
from decimal import Decimal

import pytest
from django.db import connection
from rest_framework.test import APIClient

from orgs.models import OrgStatus
from quotas.models import Allocation
from quotas.selectors import pool_guaranteed_tps
from tests.factories import OperatorFactory, OrganizationFactory, PoolFactory

GRANTERS = 50


@pytest.mark.django_db(transaction=True)
def test_fifty_concurrent_grants_never_overcommit_the_pool():
    # 10,000 TPS x 0.9 = 9,000 guaranteeable; 700 each fits 12 times (8,400), not 13 (9,100).
    pool = PoolFactory(capacity_tps=10_000, guaranteeable_ratio=Decimal("0.900"))
    orgs = [OrganizationFactory(status=OrgStatus.ACTIVE) for _ in range(GRANTERS)]
    operator = OperatorFactory()
    barrier = threading.Barrier(GRANTERS)
    responses: list = [None] * GRANTERS

    def grant(i: int) -> None:
        client = APIClient()
        client.force_authenticate(operator)
        barrier.wait()
        try:
            responses[i] = client.post("/api/v1/allocations/", {
                "org": orgs[i].pk, "pool": pool.pk, "guaranteed_tps": 700, "burst_tps": 1_000,
                "daily_tokens": 1_000_000, "max_concurrency": 10}, format="json")
        finally:
            connection.close()

    threads = [threading.Thread(target=grant, args=(i,)) for i in range(GRANTERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    codes = [r.status_code for r in responses]
    assert codes.count(201) == 12
    assert codes.count(422) == GRANTERS - 12
    refusals = [r.json()["error"] for r in responses if r.status_code == 422]
    assert {e["code"] for e in refusals} == {"capacity_exhausted"}
    assert {e["details"]["free_tps"] for e in refusals} == {600}
    assert Allocation.objects.filter(pool=pool).count() == 12
    assert pool_guaranteed_tps(pool=pool) == 8_400


@pytest.mark.django_db(transaction=True)
def test_lowering_capacity_races_with_grants_without_breaking_the_invariant():
    pool = PoolFactory(capacity_tps=10_000, guaranteeable_ratio=Decimal("1.000"))
    orgs = [OrganizationFactory(status=OrgStatus.ACTIVE) for _ in range(10)]
    operator = OperatorFactory()
    barrier = threading.Barrier(11)

    def grant(org) -> None:
        client = APIClient()
        client.force_authenticate(operator)
        barrier.wait()
        client.post("/api/v1/allocations/", {
            "org": org.pk, "pool": pool.pk, "guaranteed_tps": 1_000, "burst_tps": 1_000,
            "daily_tokens": 1_000, "max_concurrency": 1}, format="json")
        connection.close()

    def shrink() -> None:
        client = APIClient()
        client.force_authenticate(operator)
        barrier.wait()
        client.post(f"/api/v1/pools/{pool.pk}/capacity/", {"capacity_tps": 5_000},
                    format="json")
        connection.close()

    threads = [threading.Thread(target=grant, args=(o,)) for o in orgs]
    threads.append(threading.Thread(target=shrink))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    pool.refresh_from_db()
    assert pool_guaranteed_tps(pool=pool) <= pool.guaranteeable_tps
