"""Publishing is coalesced per transaction: one publish per org per commit, one script call per
pool for a pool-wide change. Counted at the engine's script calls, against real Redis."""

from collections import Counter

import pytest
from django.db import transaction

from orgs.services.api_keys import api_key_create
from orgs.services.lifecycle import org_suspend
from quotas.limiter import state
from quotas.limiter.schema import KEY, ORG, POOL, pool_key
from quotas.publish import limits_publish_pools_now_or_queue
from quotas.services import allocation_change, pool_capacity_set, pool_settings_set
from rollout.waves import wave_open
from tests.aio import limiter_authorize
from tests.factories import PoolFactory, RolloutWaveFactory
from tests.quotas.conftest import tenant_create
from tests.waitlist import approved_application

pytestmark = pytest.mark.django_db


@pytest.fixture
def script_calls(monkeypatch) -> Counter:
    """Script name -> calls the engine's writes made (each still runs against Redis)."""
    calls: Counter = Counter()
    run = state.script_run

    def counted(name, **kwargs):
        calls[name] += 1
        return run(name, **kwargs)

    monkeypatch.setattr(state, "script_run", counted)
    return calls


@pytest.fixture
def commit(django_capture_on_commit_callbacks):
    """Run the after-commit callbacks of what happens inside, as a real commit would."""
    return lambda: django_capture_on_commit_callbacks(execute=True)


def test_a_wave_publishes_each_admitted_org_once_and_the_pool_once(
        limiter, operator, commit, published_limits, script_calls):
    pool = PoolFactory(region="us-east", capacity_tps=1_000)
    with commit():
        already = tenant_create(pool=pool, guaranteed_tps=100, burst_tps=100)
        admitted = [approved_application(operator, pool, f"Org {i}").org for i in range(3)]
    published_limits.clear()
    script_calls.clear()
    wave = RolloutWaveFactory(pool=pool, capacity_tps=1_000, guaranteed_tps=300, max_orgs=10)

    with commit():
        wave_open(wave=wave, actor=operator)

    # Each org was admitted and granted an allocation (two changes): published once. The org
    # that was already in the pool is not republished: the capacity moved the headroom only.
    assert sorted(published_limits) == sorted(org.pk for org in admitted)
    assert already.org.pk not in published_limits
    assert script_calls == {"org_publish": 3, "pool_publish": 1}


def test_a_capacity_change_is_one_script_call_for_the_pool(limiter, commit, published_limits,
                                                           script_calls):
    pool = PoolFactory(capacity_tps=1_000)
    for _ in range(3):
        tenant_create(pool=pool, guaranteed_tps=100, burst_tps=200)
    script_calls.clear()

    with commit():
        pool_capacity_set(pool=pool, capacity_tps=2_000, actor="test")

    assert script_calls == {"pool_publish": 1}
    assert published_limits == []
    headroom = limiter.hget(pool_key(pool.pk, KEY.pool), POOL.headroom_rate)
    assert int(headroom) == 2_000 - 3 * 100


def test_a_lease_ttl_change_reaches_redis_with_the_pools_values(limiter, commit, script_calls):
    pool = PoolFactory(capacity_tps=1_000)
    tenant_create(pool=pool, guaranteed_tps=100, burst_tps=200)
    assert int(limiter.hget(pool_key(pool.pk, KEY.pool), POOL.lease_ttl)) == 15_000
    script_calls.clear()
    with commit():
        pool_settings_set(pool=pool, actor="test", capacity_tps=1_000,
                          guaranteeable_ratio=pool.guaranteeable_ratio,
                          limiter_failure_policy=pool.limiter_failure_policy,
                          speed_floor_output_tps=300, ttft_ceiling_ms=2000,
                          lease_ttl_seconds=45)
    assert script_calls == {"pool_publish": 1}
    assert int(limiter.hget(pool_key(pool.pk, KEY.pool), POOL.lease_ttl)) == 45_000


def test_many_changes_to_one_org_in_one_transaction_publish_it_once(
        limiter, commit, published_limits, script_calls):
    t = tenant_create(guaranteed_tps=100, burst_tps=100, max_concurrency=5)
    script_calls.clear()

    with commit(), transaction.atomic():
        allocation_change.nested(allocation=t.allocation, actor="test", max_concurrency=4)
        allocation_change.nested(allocation=t.allocation, actor="test", max_concurrency=3)
        api_key_create.nested(org=t.org, name="second", actor="test")

    assert published_limits == [t.org.pk]
    assert script_calls == {"org_publish": 1}
    assert limiter.hget(pool_key(t.pool.pk, KEY.org, t.org.pk), ORG.max_concurrency) == b"3"


def test_a_pool_publish_with_redis_down_is_handed_to_a_retry(limiter, settings, caplog):
    pool = PoolFactory()
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # the engine follows the setting
    limits_publish_pools_now_or_queue({pool.pk})
    assert f"limiter publish of pool {pool.pk} failed" in caplog.text


@pytest.mark.django_db(transaction=True)
def test_a_suspension_reaches_redis_as_its_transaction_commits(limiter, published_limits):
    t = tenant_create(guaranteed_tps=100, burst_tps=100)
    published_limits.clear()
    org_suspend(org=t.org, actor="test", reason="abuse")  # its own transaction, committed
    assert published_limits == [t.org.pk]
    assert limiter_authorize(pool_id=t.pool.pk, api_key=t.plaintext, request_id="r1",
                             input_tokens=1, max_output_tokens=1).outcome == "org_not_active"
