"""The limits authorize reads on every call travel packed (cmsgpack) in one field of the org's
and the pool's hash (LayoutFields.limits), written by the publishes beside the readable fields;
bucket levels too (LayoutFields.levels), written by authorize and settle. Against real Redis:
the packed limits are the readable ones, and a hash written before they were packed (a
deployment's Redis on upgrade) is decided exactly as a packed one."""

from decimal import Decimal

import pytest

from quotas.limiter.clock import clock, epoch_ms
from quotas.limiter.schema import BUCKET, KEY, LAYOUT, ORG, POOL, pool_key
from quotas.services import pool_capacity_set
from tests.aio import limiter_authorize
from tests.factories import PoolFactory
from tests.quotas.conftest import tenant_create

pytestmark = pytest.mark.django_db

ORG_LIMITS = ("daily_tokens", "max_concurrency", "guaranteed_rate", "guaranteed_capacity",
              "burst_rate", "burst_capacity", "input_guaranteed_rate",
              "input_guaranteed_capacity", "input_burst_rate", "input_burst_capacity",
              "input_price", "output_price")
POOL_LIMITS = ("headroom_rate", "headroom_capacity", "input_headroom_rate",
               "input_headroom_capacity", "estimate_default", "estimate_floor")


def packed(redis, key: str) -> list:
    """The packed limits of hash `key`, unpacked by Redis's own cmsgpack."""
    return redis.eval("return {cmsgpack.unpack(redis.call('HGET', KEYS[1], ARGV[1]))}", 1, key,
                      LAYOUT.limits)


def readable(redis, key: str, fields, names) -> list[int]:
    return [int(v) for v in redis.hmget(key, [getattr(fields, n) for n in names])]


def prefill_tenant(**limits):
    pool = PoolFactory(capacity_tps=10_000, prefill_capacity_tps=100_000,
                       guaranteeable_ratio=Decimal("0.900"))
    return tenant_create(pool=pool, guaranteed_tps=100, burst_tps=300,
                         guaranteed_input_tps=1_000, burst_input_tps=3_000, daily_tokens=50_000,
                         max_concurrency=7, **limits)


def test_the_publishes_pack_exactly_the_readable_limits(limiter):
    """Then the instant of the next scheduled change: 0, none (test_booking_edges.py)."""
    t = prefill_tenant()
    org_key, pool_hash = pool_key(t.pool.pk, KEY.org, t.org.pk), pool_key(t.pool.pk, KEY.pool)

    assert packed(limiter, org_key) == [*readable(limiter, org_key, ORG, ORG_LIMITS), 0]
    assert packed(limiter, org_key)[:2] == [50_000, 7]
    assert packed(limiter, pool_hash) == [*readable(limiter, pool_hash, POOL, POOL_LIMITS), 0]

    pool_capacity_set(pool=t.pool, capacity_tps=20_000, actor="test")  # pool_publish alone

    assert packed(limiter, pool_hash) == [*readable(limiter, pool_hash, POOL, POOL_LIMITS), 0]
    assert packed(limiter, pool_hash)[0] == int(limiter.hget(pool_hash, POOL.headroom_rate)) > 0


def _decide(t, request_id: str):
    return limiter_authorize(pool_id=t.pool.pk, api_key=t.plaintext, request_id=request_id,
                             input_tokens=400, max_output_tokens=200)


def test_hashes_published_before_limits_were_packed_are_decided_the_same(limiter):
    packed_tenant, legacy_tenant = prefill_tenant(), prefill_tenant()
    limiter.hdel(pool_key(legacy_tenant.pool.pk, KEY.org, legacy_tenant.org.pk), LAYOUT.limits)
    limiter.hdel(pool_key(legacy_tenant.pool.pk, KEY.pool), LAYOUT.limits)

    for n in range(12):  # until the concurrency limit (7) refuses
        now, then = _decide(packed_tenant, f"r{n}"), _decide(legacy_tenant, f"r{n}")
        assert then._replace(org_id=now.org_id, api_key_id=now.api_key_id) == now
    assert now.outcome == "concurrency_exceeded"
    assert (now.input_limit, now.output_limit, now.day_limit) == (30_000, 3_000, 50_000)


def test_without_a_published_estimate_a_legacy_pool_reserves_max_output_tokens(limiter):
    t = tenant_create(guaranteed_tps=10_000, burst_tps=10_000)
    pool_hash = pool_key(t.pool.pk, KEY.pool)
    limiter.hdel(pool_hash, LAYOUT.limits, POOL.estimate_default, POOL.estimate_floor)

    assert _decide(t, "legacy").reserved_output_tokens == 200
    limiter.hset(pool_hash, POOL.estimate_default, 150)  # readable fields are read then
    assert _decide(t, "fallback").reserved_output_tokens == 150


def test_levels_written_before_they_were_packed_are_read_once_then_packed(limiter):
    t = tenant_create(guaranteed_tps=100, burst_tps=200)  # buckets of 1,000 and 1,000 tokens
    org_key = pool_key(t.pool.pk, KEY.org, t.org.pk)
    _decide(t, "first")  # 600 tokens (the pool's default estimate is above max_output_tokens)
    limiter.hdel(org_key, LAYOUT.levels)
    limiter.hset(org_key, mapping={BUCKET.guaranteed: "10.5", BUCKET.burst: "5",
                                   BUCKET.at: str(epoch_ms(clock.now()))})

    refused = limiter_authorize(pool_id=t.pool.pk, api_key=t.plaintext, request_id="big",
                                input_tokens=20, max_output_tokens=0)
    admitted = limiter_authorize(pool_id=t.pool.pk, api_key=t.plaintext, request_id="small",
                                 input_tokens=10, max_output_tokens=0)

    assert (refused.outcome, refused.tokens_remaining) == ("tps_exceeded", 15)
    assert (admitted.outcome, admitted.tokens_remaining) == ("allowed", 5)
    assert limiter.hexists(org_key, LAYOUT.levels)  # and from now on, packed
    assert _decide(t, "next").outcome == "tps_exceeded"
