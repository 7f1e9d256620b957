"""PostgreSQL -> Redis: services publish after commit; flushed pools rebuild themselves."""

import threading
from datetime import timedelta

import pytest

from metering.models import UsageHourly
from orgs.models import SuspensionReason
from orgs.services.api_keys import api_key_revoke
from orgs.services.lifecycle import org_offboard, org_restore, org_suspend
from quotas.publish import (
    limiter_sync_pool,
    limits_publish_orgs_now_or_queue,
    spend_add,
    spend_cap_set,
)
from quotas.services import allocation_change, allocation_end
from tests.aio import limiter_authorize
from tests.quotas.conftest import tenant_create

pytestmark = pytest.mark.django_db


def authorize(t, request_id, *, cost=100, api_key=None):
    return limiter_authorize(pool_id=t.pool.pk, api_key=api_key or t.plaintext,
                             request_id=request_id, input_tokens=cost - 1, max_output_tokens=1)


@pytest.fixture
def commit(django_capture_on_commit_callbacks):
    """Run the services' after-commit publishes, as a real commit would."""
    return lambda: django_capture_on_commit_callbacks(execute=True)


def test_suspension_and_restore_take_effect(tenant, commit):
    with commit():
        org_suspend(org=tenant.org, actor="test", reason="abuse")
    assert authorize(tenant, "r1").outcome == "org_not_active"
    with commit():
        org_restore(org=tenant.org, actor="test")
    assert authorize(tenant, "r2").outcome == "allowed"


def test_suspension_for_payment_answers_payment_required(tenant, commit):
    with commit():
        org_suspend(org=tenant.org, actor="stripe", cause=SuspensionReason.PAYMENT)
    assert authorize(tenant, "r1").outcome == "payment_required"


def test_offboarded_org_is_not_active(tenant, commit):
    with commit():
        org_offboard(org=tenant.org, actor="test")
    assert authorize(tenant, "r1").outcome == "org_not_active"


def test_revoked_key_is_refused(tenant, commit):
    with commit():
        api_key_revoke(key=tenant.key, actor="test")
    assert authorize(tenant, "r1").outcome == "invalid_api_key"


def test_ended_allocation_refuses_with_no_allocation(tenant, commit):
    with commit():
        allocation_end(allocation=tenant.allocation, actor="test")
    assert authorize(tenant, "r1").outcome == "no_allocation"


def test_allocation_change_is_published(tenant, commit):
    with commit():
        allocation_change(allocation=tenant.allocation, actor="test", max_concurrency=1)
    assert authorize(tenant, "r1").allowed
    assert authorize(tenant, "r2").outcome == "concurrency_exceeded"


@pytest.mark.django_db(transaction=True)  # the rebuild reads the rows in the loop's threads
def test_flushed_redis_is_rebuilt_by_authorize_with_the_days_usage(
        tenant, limiter, limiter_clock):
    hour = limiter_clock.now().replace(minute=0)
    UsageHourly.objects.create(org=tenant.org, pool=tenant.pool, api_key=tenant.key, hour=hour,
                               requests=1, input_tokens=40_000, output_tokens=10_000)
    limiter.flushdb()
    d = authorize(tenant, "r1")
    assert d.outcome == "allowed" and d.day_remaining == 100_000 - 50_000 - 100
    assert limiter.exists(f"{{p{tenant.pool.pk}}}:synced")


def test_unknown_key_in_a_synced_pool_does_not_touch_the_database(
        tenant, django_assert_num_queries):
    with django_assert_num_queries(0):
        assert authorize(tenant, "r1", api_key="sk_aaaaaaaaaaaa_guess").outcome == \
            "invalid_api_key"


def test_spend_cap_reached(tenant):
    spend_cap_set(org_id=tenant.org.pk, micros=1_000_000)
    spend_add(org_id=tenant.org.pk, month=tenant_month(), micros=999_999)
    assert authorize(tenant, "r1").allowed
    spend_add(org_id=tenant.org.pk, month=tenant_month(), micros=1)
    assert authorize(tenant, "r2").outcome == "spend_cap_reached"


def tenant_month():
    from quotas.limiter.clock import clock, month_stamp

    return month_stamp(clock.now())


def test_publish_with_redis_down_does_not_raise(tenant, settings, caplog):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # the engine follows the setting
    limits_publish_orgs_now_or_queue({tenant.org.pk})
    assert "limiter publish of org" in caplog.text


@pytest.mark.django_db(transaction=True)
def test_concurrency_cap_holds_under_a_thread_race(limiter):
    t = tenant_create(guaranteed_tps=10_000, burst_tps=10_000, daily_tokens=10**9,
                      max_concurrency=7)
    outcomes = _race(t, 40, cost=10)
    assert outcomes.count("allowed") == 7
    assert outcomes.count("concurrency_exceeded") == 33


@pytest.mark.django_db(transaction=True)
def test_daily_and_tps_limits_hold_under_a_thread_race(limiter):
    daily = tenant_create(guaranteed_tps=10_000, burst_tps=10_000, daily_tokens=1_000,
                          max_concurrency=1000)
    assert _race(daily, 40, cost=100).count("allowed") == 10
    tps = tenant_create(guaranteed_tps=100, burst_tps=150, daily_tokens=10**9,
                        max_concurrency=1000)
    # 1,000 guaranteed + 500 burst tokens in the buckets.
    assert _race(tps, 40, cost=100).count("allowed") == 15


@pytest.mark.django_db(transaction=True)
def test_retries_racing_on_one_request_id_reserve_once(limiter):
    t = tenant_create(guaranteed_tps=10_000, burst_tps=10_000, daily_tokens=10**9,
                      max_concurrency=100)
    outcomes = _race(t, 20, cost=100, same_id=True)
    assert sorted(set(outcomes)) == ["allowed", "duplicate"]
    assert outcomes.count("allowed") == 1
    assert authorize(t, "after", cost=1).day_remaining == 10**9 - 100 - 1


def _race(t, n: int, *, cost: int, same_id: bool = False) -> list[str]:
    barrier = threading.Barrier(n)
    outcomes: list[str] = []

    def worker(i):
        barrier.wait()
        outcomes.append(authorize(t, "race" if same_id else f"race-{i}", cost=cost).outcome)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return outcomes


def test_key_expiry_is_published(tenant, limiter_clock):
    from orgs.services.api_keys import api_key_create

    _, plaintext = api_key_create(org=tenant.org, name="k", actor="test",
                                  expires_at=limiter_clock.now() + timedelta(minutes=5))
    limiter_sync_pool(pool_id=tenant.pool.pk)
    assert authorize(tenant, "r1", api_key=plaintext).allowed


def test_limiter_sync_command_rebuilds_every_pool(tenant, limiter, capsys):
    from django.core.management import call_command

    limiter.flushdb()
    call_command("limiter_sync")
    assert f"pool {tenant.pool.pk}: 1 org(s) synced" in capsys.readouterr().out
    assert limiter.exists(f"{{p{tenant.pool.pk}}}:synced")
    assert authorize(tenant, "r1").allowed


def test_publish_task_is_safe_to_run_twice(tenant, limiter):
    from quotas.tasks import limits_publish_org

    limiter.delete(f"{{p{tenant.pool.pk}}}:org:{tenant.org.pk}")
    assert limits_publish_org.delay(org_id=tenant.org.pk).get() == 1
    assert limits_publish_org.delay(org_id=tenant.org.pk).get() == 1
    assert authorize(tenant, "r1").allowed
