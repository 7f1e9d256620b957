"""The limiter on a real 3-node Redis Cluster (private redis-servers on loopback, formed by
hand): the engine, publish, settle, sync and rebuild tests run here again, through redis-py's
cluster client, with `SLUICE_LIMITER_REDIS_URL=redis+cluster://...`.

Every key a script touches carries its pool's hash tag, so each call runs on one node: the one
serving KEYS[1]'s slot, asked directly (no MOVED redirection on the way).
"""

import pytest
from redis.cluster import RedisCluster

from quotas.hook.fail_open import fail_open_reset
from quotas.hook.gateway_tokens import gateway_token_cache_clear, gateway_token_create
from quotas.hook.routing import pool_routes_reload
from quotas.limiter.connection import limiter_client, limiter_reset
from quotas.limiter.schema import KEY, pool_key
from tests.aio import limiter_authorize
from tests.factories import PoolFactory
from tests.hook import HookClient
from tests.quotas.conftest import tenant_create

# The same tests, collected again in this module: here `redis_client` is the cluster's.
from tests.quotas.limiter.test_engine import (  # noqa: F401
    test_allowed_request_reserves_input_plus_max_output_and_reports_headers,
    test_burst_borrows_from_pool_headroom_and_never_past_capacity,
    test_concurrency_cap_and_expiry_frees_the_slot,
    test_daily_quota_and_utc_day_rollover,
    test_dry_run_consumes_nothing,
    test_excess_usage_is_debited_and_unreserved_usage_counted,
    test_one_orgs_key_never_debits_another_org,
    test_request_id_reused_by_another_org_is_a_conflict,
    test_same_request_id_returns_the_same_reservation_without_debiting,
    test_settlement_frees_the_slot_and_refunds,
    test_settlement_is_idempotent,
    test_tps_bucket_refills_at_the_guaranteed_rate,
    test_unknown_key_is_refused,
)
from tests.quotas.limiter.test_leases import (  # noqa: F401
    test_a_heartbeat_renews_so_the_slot_stays_held,
    test_a_released_lease_without_usage_is_billed_after_the_grace,
    test_each_lease_is_answered_alone,
    test_release_frees_the_slot_at_once_and_is_idempotent,
    test_renewal_racing_expiry_exactly_one_wins,
    test_the_sweep_claims_due_leases_with_their_checkpoint_once,
)
from tests.quotas.test_publish import (  # noqa: F401
    commit,
    script_calls,
    test_a_capacity_change_is_one_script_call_for_the_pool,
    test_a_suspension_reaches_redis_as_its_transaction_commits,
    test_a_wave_publishes_each_admitted_org_once_and_the_pool_once,
    test_many_changes_to_one_org_in_one_transaction_publish_it_once,
)
from tests.quotas.test_publish_sync import (  # noqa: F401
    test_concurrency_cap_holds_under_a_thread_race,
    test_daily_and_tps_limits_hold_under_a_thread_race,
    test_flushed_redis_is_rebuilt_by_authorize_with_the_days_usage,
    test_limiter_sync_command_rebuilds_every_pool,
    test_retries_racing_on_one_request_id_reserve_once,
    test_revoked_key_is_refused,
    test_spend_cap_reached,
    test_suspension_and_restore_take_effect,
    test_unknown_key_in_a_synced_pool_does_not_touch_the_database,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def redis_client(cluster, settings):
    """The cluster, emptied, and the engine pointed at it."""
    settings.LIMITER_REDIS_URL = cluster.url
    limiter_reset()
    client = RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
    client.flushdb()
    yield client
    client.close()
    limiter_reset()


def _evalsha_calls(cluster) -> dict[int, int]:
    stats = {n.port: n.client().info("commandstats").get("cmdstat_evalsha", {})
             for n in cluster.nodes}
    return {port: s.get("calls", 0) for port, s in stats.items()}


def test_each_authorize_runs_on_the_node_serving_its_pool(limiter, cluster):
    tenants = [tenant_create(guaranteed_tps=100, burst_tps=100, daily_tokens=10**6,
                             max_concurrency=100) for _ in range(6)]
    nodes = limiter_client()
    expected = {n.port: 0 for n in cluster.nodes}
    for t in tenants:
        expected[nodes.get_node_from_key(pool_key(t.pool.pk, KEY.registry)).port] += 1
    assert sum(1 for calls in expected.values() if calls) >= 2  # the pools are spread
    before = _evalsha_calls(cluster)
    for t in tenants:
        assert limiter_authorize(pool_id=t.pool.pk, api_key=t.plaintext, request_id="r1",
                                 input_tokens=1, max_output_tokens=1).allowed
    after = _evalsha_calls(cluster)
    assert {port: after[port] - before[port] for port in after} == expected


@pytest.mark.django_db(transaction=True)  # the served app's threads read the rows
def test_the_hook_serves_authorize_from_a_cluster(limiter, settings):
    fail_open_reset()
    gateway_token_cache_clear()
    _, plaintext = gateway_token_create(name="edge", actor="test")
    t = tenant_create(pool=PoolFactory(), guaranteed_tps=100, burst_tps=100,
                      daily_tokens=10**6, max_concurrency=100)
    pool_routes_reload()
    limiter.flushdb()  # and a rebuild of the pool, and of the gateway tokens, on the way
    answer = HookClient(HTTP_AUTHORIZATION=f"Bearer {plaintext}").post(
        "/api/gateway/v1/authorize", {"request_id": "r1", "api_key": t.plaintext,
                                      "model": t.pool.model, "input_tokens": 1,
                                      "max_output_tokens": 1}, content_type="application/json")
    assert answer.status_code == 200 and "limiter" not in answer.json()


@pytest.mark.django_db(transaction=True)  # the loop's threads read the rows it commits
def test_the_event_loop_asks_each_pools_node_over_its_own_connection(limiter, cluster):
    """Authorize decided on the server's event loop (quotas/hook/asgi.py): each pool's
    script runs on the node serving its slot, over the loop's connection to that node."""
    from tests.quotas.hook.test_on_loop import OnLoop

    gateway_token_cache_clear()
    _, plaintext = gateway_token_create(name="edge-loop", actor="test")
    tenants = [tenant_create(guaranteed_tps=100, burst_tps=100, daily_tokens=10**6,
                             max_concurrency=100) for _ in range(6)]
    pool_routes_reload()
    nodes = limiter_client()
    expected = {n.port: 0 for n in cluster.nodes}
    for t in tenants:
        expected[nodes.get_node_from_key(pool_key(t.pool.pk, KEY.registry)).port] += 1
    on_loop = OnLoop(plaintext)
    before = _evalsha_calls(cluster)
    answers = on_loop.many([{"request_id": "r1", "api_key": t.plaintext, "model": t.pool.model,
                             "input_tokens": 1, "max_output_tokens": 1} for t in tenants])
    after = _evalsha_calls(cluster)
    assert [a.json()["org"] for a in answers] == [t.org.pk for t in tenants]
    assert {port: after[port] - before[port] for port in after} == expected
