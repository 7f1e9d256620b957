import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from orgs.models import ApiKey, Organization
from orgs.services.api_keys import api_key_create
from quotas.limiter.clock import clock
from quotas.limiter.connection import limiter_reset
from quotas.models import Allocation, CapacityPool
from quotas.publish import limiter_sync_pool
from tests.factories import AllocationFactory, OrganizationFactory, PoolFactory

# Noon UTC tomorrow: ahead of the wall clock (services compare expiries with it), and
# half a day from the UTC rollover.
FROZEN_AT = (datetime.now(UTC) + timedelta(days=1)).replace(hour=12, minute=0, second=0,
                                                              microsecond=0)


@pytest.fixture
def limiter_clock():
    clock.freeze(FROZEN_AT)
    yield clock
    clock.unfreeze()


@pytest.fixture
def patient_redis(settings):
    """Tests of thousands of decisions, or of 50 threads, on a busy 2-core machine: a slow Redis
    reply must not read as Redis down (the hot path's timeout is 50 ms)."""
    settings.REDIS_TIMEOUT_SECONDS = 5


@pytest.fixture
def limiter(redis_client, limiter_clock):
    """A flushed Redis, a fresh engine connection and a frozen clock."""
    limiter_reset()
    yield redis_client
    limiter_reset()


@dataclass
class Tenant:
    org: Organization
    pool: CapacityPool
    allocation: Allocation
    key: ApiKey
    plaintext: str


def tenant_create(*, pool=None, org=None, sync=True, **limits) -> Tenant:
    """An active org with an allocation in a pool and one API key, synced to Redis."""
    pool = pool or PoolFactory()
    org = org or OrganizationFactory()
    allocation = AllocationFactory(org=org, pool=pool, **limits)
    key, plaintext = api_key_create(org=org, name="test key", actor="test")
    if sync:
        limiter_sync_pool(pool_id=pool.pk)
    return Tenant(org=org, pool=pool, allocation=allocation, key=key, plaintext=plaintext)


@pytest.fixture
def tenant(limiter, db):
    return tenant_create(guaranteed_tps=100, burst_tps=100, daily_tokens=100_000,
                         max_concurrency=5)


def threads_race(n: int, worker) -> None:
    """worker(i) for i in range(n), in n threads released together by a barrier; returns when
    all have finished."""
    barrier = threading.Barrier(n)

    def run(i: int) -> None:
        barrier.wait()
        worker(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
