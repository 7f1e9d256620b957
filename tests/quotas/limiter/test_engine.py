"""The admission engine against real Redis: every limit, idempotency, expiry, settlement."""

from dataclasses import replace
from datetime import timedelta

import pytest

from quotas.limiter.connection import engine_config, engine_configure
from quotas.limiter.engine import limiter_settle
from quotas.limiter.schema import Settlement
from tests.aio import limiter_authorize
from tests.quotas.conftest import tenant_create

pytestmark = pytest.mark.django_db


def authorize(t, request_id, *, input_tokens=50, max_output_tokens=50, **kwargs):
    return limiter_authorize(pool_id=t.pool.pk, api_key=kwargs.pop("api_key", t.plaintext),
                             request_id=request_id, input_tokens=input_tokens,
                             max_output_tokens=max_output_tokens, **kwargs)


def test_allowed_request_reserves_input_plus_max_output_and_reports_headers(tenant):
    d = authorize(tenant, "r1", input_tokens=30, max_output_tokens=70)
    assert d.outcome == "allowed"
    assert (d.org_id, d.api_key_id, d.reserved_tokens) == (tenant.org.pk, tenant.key.pk, 100)
    # Bucket: 100 TPS x 10 s, burst adds nothing here.
    assert (d.tokens_limit, d.tokens_remaining, d.tokens_reset_ms) == (1000, 900, 1000)
    assert (d.day_limit, d.day_remaining) == (100_000, 99_900)
    assert (d.requests_limit, d.requests_remaining) == (5, 4)
    assert d.day_reset_ms == 12 * 3600 * 1000


def test_same_request_id_returns_the_same_reservation_without_debiting(tenant):
    first = authorize(tenant, "r1")
    again = authorize(tenant, "r1", input_tokens=999)
    assert again.outcome == "duplicate" and again.reserved_tokens == first.reserved_tokens
    assert again.day_remaining == first.day_remaining
    assert again.requests_remaining == first.requests_remaining


def test_dry_run_consumes_nothing(tenant):
    assert authorize(tenant, "r1", dry_run=True).outcome == "allowed"
    assert authorize(tenant, "r2").day_remaining == 99_900


def test_unknown_key_is_refused(tenant):
    assert authorize(tenant, "r1", api_key="sk_000000000000_nope").outcome == "invalid_api_key"


def test_concurrency_cap_and_expiry_frees_the_slot(tenant, limiter_clock, settings):
    settings.RESERVATION_TTL_SECONDS = 60
    for i in range(5):
        assert authorize(tenant, f"r{i}", input_tokens=1, max_output_tokens=1).allowed
    denied = authorize(tenant, "r5", input_tokens=1, max_output_tokens=1)
    assert denied.outcome == "concurrency_exceeded"
    assert 1 <= denied.retry_after_ms <= 1000
    limiter_clock.advance(seconds=61)
    assert authorize(tenant, "r6", input_tokens=1, max_output_tokens=1).outcome == "allowed"


def test_settlement_frees_the_slot_and_refunds(tenant):
    for i in range(5):
        authorize(tenant, f"r{i}", input_tokens=100, max_output_tokens=100)
    assert limiter_settle(pool_id=tenant.pool.pk, settlements=[
        Settlement(request_id="r0", org_id=tenant.org.pk, input_tokens=20)]) == 1
    d = authorize(tenant, "r5", input_tokens=1, max_output_tokens=1)
    assert d.outcome == "allowed"
    assert d.day_remaining == 100_000 - 4 * 200 - 20 - 2
    assert d.tokens_remaining == 1000 - 4 * 200 - 20 - 2


def test_settlement_is_idempotent(tenant):
    authorize(tenant, "r1", input_tokens=100, max_output_tokens=100)
    s = [Settlement(request_id="r1", org_id=tenant.org.pk, input_tokens=20)]
    assert limiter_settle(pool_id=tenant.pool.pk, settlements=s) == 1
    assert limiter_settle(pool_id=tenant.pool.pk, settlements=s) == 0
    assert authorize(tenant, "r2", input_tokens=1, max_output_tokens=1).day_remaining == \
        100_000 - 20 - 2


def test_excess_usage_is_debited_and_unreserved_usage_counted(tenant):
    authorize(tenant, "r1", input_tokens=10, max_output_tokens=10)
    limiter_settle(pool_id=tenant.pool.pk, settlements=[
        Settlement(request_id="r1", org_id=tenant.org.pk, input_tokens=50),
        Settlement(request_id="never-authorized", org_id=tenant.org.pk, input_tokens=30)])
    d = authorize(tenant, "r2", input_tokens=1, max_output_tokens=1)
    assert d.day_remaining == 100_000 - 50 - 30 - 2


def test_a_late_report_owes_only_what_the_rate_has_not_repaid_since(tenant, limiter_clock):
    """Usage without a reservation is debited when it is settled, less what the guaranteed
    rate (100 tokens/s here) would have repaid since it finished; the day counts all of it."""
    from quotas.limiter.clock import clock, epoch_ms

    now = epoch_ms(clock.now())
    before = authorize(tenant, "r0", input_tokens=1, max_output_tokens=1)
    assert limiter_settle(pool_id=tenant.pool.pk, settlements=[
        Settlement(request_id="old", org_id=tenant.org.pk, input_tokens=500,
                   finished_ms=now - 10_000),  # 10 s ago: repaid by now
        Settlement(request_id="recent", org_id=tenant.org.pk, input_tokens=500,
                   finished_ms=now - 2_000),  # 2 s ago: 200 repaid, 300 owed
        Settlement(request_id="ahead", org_id=tenant.org.pk, input_tokens=50,
                   finished_ms=now + 1_000),  # a clock ahead of ours: all owed
        Settlement(request_id="unknown", org_id=tenant.org.pk, input_tokens=100),  # all owed
    ]) == 4
    after = authorize(tenant, "r1", input_tokens=1, max_output_tokens=1)
    assert after.tokens_remaining == before.tokens_remaining - 300 - 50 - 100 - 2
    assert after.day_remaining == before.day_remaining - 1_150 - 2


def test_one_batch_leaves_each_days_counter_at_what_its_requests_used(tenant, limiter_clock):
    """settle.lua moves each (org, day) counter once per batch: the sum of its events'
    corrections, whichever day they were reserved on, with the counter's expiry renewed."""
    from quotas.limiter.clock import clock, day_stamp
    from quotas.limiter.connection import limiter_client
    from quotas.limiter.schema import KEY, pool_key

    def counter(day):
        return pool_key(tenant.pool.pk, KEY.day, tenant.org.pk, day)

    yesterday = day_stamp(clock.now())
    assert authorize(tenant, "y1", input_tokens=100, max_output_tokens=100).allowed
    assert authorize(tenant, "y2", input_tokens=100, max_output_tokens=100).allowed
    limiter_clock.advance(hours=12)  # 00:00 UTC: the next day
    today = day_stamp(clock.now())
    assert authorize(tenant, "t1", input_tokens=100, max_output_tokens=100).allowed
    used = {"y1": 30, "y2": 350, "t1": 10, "u1": 40, "u2": 25}  # y2 used more than reserved
    # u3: no reservation, started yesterday (a late report): yesterday's, as a rebuild counts it.
    assert limiter_settle(pool_id=tenant.pool.pk, settlements=[
        *(Settlement(request_id=r, org_id=tenant.org.pk, input_tokens=n)
          for r, n in used.items()),
        Settlement(request_id="u3", org_id=tenant.org.pk, input_tokens=60, day=yesterday)]) == 6
    redis = limiter_client()
    assert int(redis.get(counter(yesterday))) == 30 + 350 + 60
    assert int(redis.get(counter(today))) == 10 + 40 + 25
    assert redis.pttl(counter(yesterday)) > 24 * 3600 * 1000
    assert redis.pttl(counter(today)) > 24 * 3600 * 1000


def test_daily_quota_and_utc_day_rollover(limiter, limiter_clock):
    t = tenant_create(guaranteed_tps=1000, burst_tps=1000, daily_tokens=250,
                      max_concurrency=50)
    assert authorize(t, "r1", input_tokens=100, max_output_tokens=100).allowed
    denied = authorize(t, "r2", input_tokens=50, max_output_tokens=1)
    assert denied.outcome == "daily_quota_exhausted"
    assert denied.retry_after_ms == 12 * 3600 * 1000
    limiter_clock.advance(hours=12)  # 00:00 UTC next day
    assert authorize(t, "r3", input_tokens=100, max_output_tokens=100).allowed


def test_tps_bucket_refills_at_the_guaranteed_rate(tenant, limiter_clock):
    for i in range(10):
        assert authorize(tenant, f"r{i}").allowed  # 10 x 100 tokens = the 1,000-token bucket
        limiter_settle(pool_id=tenant.pool.pk, settlements=[
            Settlement(request_id=f"r{i}", org_id=tenant.org.pk, input_tokens=100)])
    denied = authorize(tenant, "r10")
    assert denied.outcome == "tps_exceeded" and denied.retry_after_ms == 1000
    limiter_clock.advance(seconds=1)
    assert authorize(tenant, "r11").allowed


def test_request_larger_than_the_bucket_is_refused_without_retry_hint(tenant):
    d = authorize(tenant, "r1", input_tokens=900, max_output_tokens=200)
    assert d.outcome == "tps_exceeded" and d.retry_after_ms is None


def test_burst_borrows_from_pool_headroom_and_never_past_capacity(limiter, limiter_clock):
    from tests.factories import PoolFactory

    pool = PoolFactory(capacity_tps=1000)  # guaranteeable 900
    a = tenant_create(pool=pool, guaranteed_tps=400, burst_tps=600, daily_tokens=10**9,
                      max_concurrency=1000, sync=False)
    b = tenant_create(pool=pool, guaranteed_tps=400, burst_tps=600, daily_tokens=10**9,
                      max_concurrency=1000)
    # Headroom = 1000 - 800 = 200 TPS, a 2,000-token bucket shared by both orgs' bursts.
    assert authorize(a, "a1", input_tokens=4000, max_output_tokens=1500).allowed  # borrows 1500
    d = authorize(b, "b1", input_tokens=4000, max_output_tokens=1000)  # needs 1000, 500 left
    assert d.outcome == "pool_capacity_exhausted" and d.retry_after_ms == 2500
    assert authorize(b, "b2", input_tokens=4000, max_output_tokens=500).allowed
    # A's own burst bucket still has 500 but the pool has none: refused.
    assert authorize(a, "a2", input_tokens=1, max_output_tokens=1).outcome == \
        "pool_capacity_exhausted"


def test_one_orgs_key_never_debits_another_org(limiter):
    a = tenant_create(guaranteed_tps=100, burst_tps=100, daily_tokens=10_000,
                      max_concurrency=5)
    b = tenant_create(pool=a.pool, guaranteed_tps=100, burst_tps=100, daily_tokens=10_000,
                      max_concurrency=5)
    for i in range(5):
        assert authorize(a, f"a{i}").org_id == a.org.pk
    assert authorize(a, "a5").outcome == "concurrency_exceeded"
    d = authorize(b, "b0")
    assert (d.org_id, d.day_remaining, d.requests_remaining) == (b.org.pk, 9_900, 4)


def test_request_id_reused_by_another_org_is_a_conflict(limiter):
    a = tenant_create()
    b = tenant_create(pool=a.pool)
    assert authorize(a, "shared").allowed
    assert authorize(b, "shared").outcome == "request_id_conflict"


def test_expired_key_is_refused(tenant, limiter_clock):
    from orgs.services.api_keys import api_key_create
    from quotas.publish import limiter_sync_pool

    key, plaintext = api_key_create(org=tenant.org, name="short", actor="test",
                                    expires_at=limiter_clock.now() + timedelta(hours=1))
    limiter_sync_pool(pool_id=tenant.pool.pk)
    assert authorize(tenant, "r1", api_key=plaintext).allowed
    limiter_clock.advance(hours=1)
    assert authorize(tenant, "r2", api_key=plaintext).outcome == "invalid_api_key"


def test_a_caller_whose_clock_is_behind_never_refills_twice(tenant, limiter_clock):
    """Callers stamp their own `now`; one that computed it earlier but ran later must not move
    the bucket's timestamp back (the same interval would be refilled twice)."""
    t0 = limiter_clock.now()
    limiter_clock.freeze(t0 + timedelta(seconds=1))
    assert authorize(tenant, "r1").tokens_remaining == 900
    limiter_clock.freeze(t0 + timedelta(milliseconds=500))
    assert authorize(tenant, "r2").tokens_remaining == 800
    limiter_clock.freeze(t0 + timedelta(seconds=1))
    assert authorize(tenant, "r3", input_tokens=1, max_output_tokens=0).tokens_remaining == 799


def test_an_unsynced_pool_asks_the_configured_rebuild_once_then_refuses(tenant, limiter):
    """The engine reads no database: on a flushed pool it calls its `pool_rebuild`."""
    config = engine_config()
    asked: list[int] = []
    limiter.flushdb()
    engine_configure(replace(config, pool_rebuild=lambda *, pool_id: asked.append(pool_id)))
    try:
        assert authorize(tenant, "r1").outcome == "invalid_api_key"  # rebuilt nothing
        assert asked == [tenant.pool.pk]
        engine_configure(replace(config, pool_rebuild=None))
        assert authorize(tenant, "r2").outcome == "invalid_api_key"
    finally:
        engine_configure(config)


def test_publishes_keep_the_orgs_and_the_pools_hashes_hashed(tenant):
    """authorize reads 8 fields of the org's hash in one HMGET, each a linear scan when Redis
    keeps the hash as a listpack: publishes convert both hashes to the hashtable encoding
    (schema.LayoutFields), and settling, which rewrites bucket levels, keeps it."""
    from quotas.limiter.connection import limiter_client
    from quotas.limiter.schema import KEY, pool_key

    assert authorize(tenant, "r1").allowed
    limiter_settle(pool_id=tenant.pool.pk, settlements=[
        Settlement(request_id="r1", org_id=tenant.org.pk, input_tokens=20)])
    redis = limiter_client()
    for key in (pool_key(tenant.pool.pk, KEY.org, tenant.org.pk),
                pool_key(tenant.pool.pk, KEY.pool)):
        assert redis.object("encoding", key) == "hashtable", key
