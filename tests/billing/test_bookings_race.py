"""The ledger in time under real concurrency: threads, each with its own PostgreSQL connection,
booking through the REST API while operators grant allocations and change capacity. Never over
at any instant; each loser hears why, with the window's free headroom."""

import random
import threading
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from rest_framework.test import APIClient

from billing.models import BookingCharge
from orgs.models import Role
from quotas.ledger import FOREVER, ledger_steps
from quotas.models import Booking, CapacityPool
from tests.factories import (
    AllocationFactory,
    MembershipFactory,
    OperatorFactory,
    OrganizationFactory,
    PoolFactory,
    UserFactory,
)
from tests.quotas.conftest import threads_race


def _race(workers: list) -> None:
    """Every worker at once, each in its own thread with its own PostgreSQL connection."""
    def run(i: int) -> None:
        try:
            workers[i]()
        finally:
            connection.close()

    threads_race(len(workers), run)


def _owner_client(org) -> APIClient:
    user = UserFactory()
    MembershipFactory(org=org, user=user, role=Role.OWNER)
    client = APIClient()
    client.force_authenticate(user)
    return client


def _never_over(pool: CapacityPool) -> int:
    """The peak of guarantees at any instant from now on; asserts it fits the pool."""
    pool.refresh_from_db()
    now = datetime.now(UTC)
    steps = ledger_steps(pool=pool, start=now, end=now + FOREVER)
    peak = max(s.output_tps for s in steps)
    assert peak <= pool.guaranteeable_tps, (peak, pool.guaranteeable_tps)
    return peak


def _slot(hours: int) -> datetime:
    return (datetime.now(UTC) + timedelta(hours=hours)).replace(minute=0, second=0,
                                                                microsecond=0)


@pytest.mark.django_db(transaction=True)
def test_thirty_bookings_of_one_window_sell_exactly_its_room():
    # 10,000 x 0.9 = 9,000; 1,000 allocated to each of 3 orgs: 6,000 free. 30 ask 500 each.
    pool = PoolFactory(capacity_tps=10_000, guaranteeable_ratio=Decimal("0.900"))
    orgs = [OrganizationFactory() for _ in range(3)]
    for org in orgs:
        AllocationFactory(org=org, pool=pool, guaranteed_tps=1_000, burst_tps=1_000)
    clients = [(org, _owner_client(org)) for org in orgs]
    start = _slot(48)
    answers: list = [None] * 30

    def book(i: int):
        org, client = clients[i % 3]

        def work():
            answers[i] = client.post(f"/api/v1/orgs/{org.pk}/bookings/", {
                "pool": pool.pk, "starts_at": start.isoformat(),
                "ends_at": (start + timedelta(hours=2)).isoformat(), "output_tps": 500},
                format="json")
        return work

    _race([book(i) for i in range(30)])
    codes = [a.status_code for a in answers]
    assert codes.count(201) == 12 and codes.count(409) == 18
    losses = [a.json()["error"] for a in answers if a.status_code == 409]
    assert {e["code"] for e in losses} == {"booking_no_room"}
    assert {e["details"]["free_tps"] for e in losses} == {0}
    assert Booking.objects.count() == BookingCharge.objects.count() == 12
    assert _never_over(pool) == 9_000


@pytest.mark.django_db(transaction=True)
def test_overlapping_bookings_grants_and_capacity_changes_never_overcommit_any_instant():
    rng = random.Random(35)
    pool = PoolFactory(capacity_tps=10_000, guaranteeable_ratio=Decimal("1.000"))
    bookers = [OrganizationFactory() for _ in range(4)]
    for org in bookers:
        AllocationFactory(org=org, pool=pool, guaranteed_tps=500, burst_tps=500)
    clients = [(org, _owner_client(org)) for org in bookers]
    newcomers = [OrganizationFactory() for _ in range(5)]
    operator = OperatorFactory()
    ops = APIClient()
    ops.force_authenticate(operator)
    answers: list = []
    lock = threading.Lock()

    def keep(kind, response):
        with lock:
            answers.append((kind, response))

    def book(org, client, start, hours, tps):
        def work():
            keep("booking", client.post(f"/api/v1/orgs/{org.pk}/bookings/", {
                "pool": pool.pk, "starts_at": start.isoformat(),
                "ends_at": (start + timedelta(hours=hours)).isoformat(), "output_tps": tps},
                format="json"))
        return work

    def grant(org):
        def work():
            client = APIClient()
            client.force_authenticate(operator)
            keep("grant", client.post("/api/v1/allocations/", {
                "org": org.pk, "pool": pool.pk, "guaranteed_tps": 1_500, "burst_tps": 1_500,
                "daily_tokens": 1_000, "max_concurrency": 1}, format="json"))
        return work

    def capacity(tps):
        def work():
            client = APIClient()
            client.force_authenticate(operator)
            keep("capacity", client.post(f"/api/v1/pools/{pool.pk}/capacity/",
                                         {"capacity_tps": tps}, format="json"))
        return work

    workers = []
    for _ in range(20):
        org, client = rng.choice(clients)
        workers.append(book(org, client, _slot(24 + rng.randrange(0, 12)), rng.choice([1, 2, 4]),
                            rng.choice([500, 1_000, 2_000, 3_000])))
    workers += [grant(org) for org in newcomers]
    workers += [capacity(7_000), capacity(12_000)]
    _race(workers)

    expected = {"booking": {201, 409}, "grant": {201, 422}, "capacity": {200, 422}}
    for kind, answer in answers:
        assert answer.status_code in expected[kind], (kind, answer.content)
        if answer.status_code == 409:
            error = answer.json()["error"]
            assert error["code"] == "booking_no_room" and error["details"]["free_tps"] >= 0
        elif answer.status_code == 422:
            assert answer.json()["error"]["code"] in {
                "capacity_exhausted", "capacity_below_guarantees", "capacity_below_bookings"}
    assert sum(1 for kind, a in answers if kind == "booking" and a.status_code == 201) > 0
    _never_over(pool)
