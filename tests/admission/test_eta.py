"""The ETA the admission queue tells (queue.lua, eta_of): a concurrency slot's from what the
org's leases say of their ends, the waiters ahead and a plain reservation's expiry; the TPS's
from the org's guarantee alone. Real Redis, the real clock: leases' progress and bucket levels
are written relative to it, and the ETAs asserted are what they imply, within the
milliseconds the test itself takes."""

import asyncio

import pytest

from admission.engine.waiting import QueueConfig, queue_configure
from quotas.limiter.clock import clock
from quotas.limiter.connection import limiter_client
from quotas.limiter.engine import LeaseNamed, limiter_leases_update
from quotas.limiter.schema import KEY, LAYOUT, RESERVATION, pool_key
from tests.admission.test_hook_queue import slot_hold
from tests.admission.test_queue import ask, together, until_waiting, waiting
from tests.aio import limiter_authorize
from tests.factories import PoolFactory
from tests.quotas.conftest import tenant_create

pytestmark = pytest.mark.django_db(transaction=True)
GW = "gw-test"


def lease(t, request_id: str, *, max_output_tokens: int = 100) -> None:
    """A lease just admitted, no progress reported yet."""
    d = limiter_authorize(pool_id=t.pool.pk, api_key=t.plaintext, request_id=request_id,
                          input_tokens=10, max_output_tokens=max_output_tokens,
                          lease_owner=GW, lease_id=f"sig-{request_id}",
                          lease_for=f"{t.org.pk}.{t.key.pk}", lease_ttl_ms=600_000)
    assert d.allowed and d.reserved_output_tokens == max_output_tokens, d


async def release(t, request_id: str, *, progress: int) -> None:
    answers = await limiter_leases_update(
        pool_id=t.pool.pk, owner=GW, release=True,
        leases=[LeaseNamed(f"sig-{request_id}", t.org.pk, t.key.pk, progress)])
    assert [a.status for a in answers] == ["released"]


def test_the_eta_is_when_the_orgs_leases_end_and_counts_the_waiters_ahead(queue_redis, loop):
    """Two slots, both held by leases: `fast` has delivered 500 of its 1,000 output tokens in
    1 s (it ends 1 s from now); `fresh` has reported nothing (the pool's TTFT ceiling, 2 s,
    then 100 tokens at its 300 tokens/s floor: 2.33 s from now). The first waiter gets the
    first slot (ETA ~1 s: it waits); the next one the second (ETA ~2.33 s, beyond its 2 s
    budget: refused at once). Released, `fast`'s slot admits the first."""
    t = tenant_create(guaranteed_tps=1000, burst_tps=1000, max_concurrency=2)
    lease(t, "fast", max_output_tokens=1000)
    lease(t, "fresh")
    now = clock.now_ms()
    limiter_client().hset(pool_key(t.pool.pk, KEY.reservation, "fast"), mapping={
        RESERVATION.started: now - 1000, RESERVATION.progress: 500,
        RESERVATION.progress_at: now})

    async def run():
        first = asyncio.ensure_future(ask(t, budget_ms=5000, request_id="first"))
        await until_waiting(queue_redis, t.pool.pk)
        second = await ask(t, budget_ms=2000, request_id="second")
        still = waiting(queue_redis, t.pool.pk)
        await release(t, "fast", progress=600)
        return await first, second, still

    first, second, still = loop.run(run())
    assert second.decision.outcome == "concurrency_exceeded" and second.queued_ms is None
    assert 2000 < second.eta_ms <= 2334 and second.decision.retry_after_ms == second.eta_ms
    assert still == 1
    assert first.decision.outcome == "allowed" and first.queued_ms is not None
    assert 500 < first.eta_ms <= 1000


def test_a_plain_reservation_frees_its_slot_at_its_expiry_as_far_as_the_eta_knows(queue_redis,
                                                                                  loop):
    """A reservation without a lease says nothing of its end but its expiry (600 s): a request
    waiting for its slot is refused at once, retry = that expiry."""
    t = tenant_create(guaranteed_tps=1000, burst_tps=1000, max_concurrency=1)
    d = limiter_authorize(pool_id=t.pool.pk, api_key=t.plaintext, request_id="plain",
                          input_tokens=10, max_output_tokens=100)
    assert d.allowed
    outcome = loop.run(ask(t, budget_ms=20_000))
    assert outcome.decision.outcome == "concurrency_exceeded"
    assert 590_000 < outcome.eta_ms <= 600_000
    assert outcome.decision.retry_after_ms == outcome.eta_ms
    assert waiting(queue_redis, t.pool.pk) == 0


def test_a_waiter_within_its_budget_is_admitted_when_the_lease_is_released(queue_redis, loop):
    t = tenant_create(guaranteed_tps=1000, burst_tps=1000, max_concurrency=1)
    slot_hold(t, "held", ends_in_ms=300)

    async def run():
        waiter = asyncio.ensure_future(ask(t, budget_ms=10_000, request_id="w"))
        await until_waiting(queue_redis, t.pool.pk)
        await release(t, "held", progress=60)
        return await waiter

    outcome = loop.run(run())
    assert outcome.decision.outcome == "allowed" and outcome.queued_ms is not None
    assert 0 < outcome.eta_ms <= 300


def levels_set(t, *, guaranteed: float, burst: float, headroom: float) -> None:
    """The org's guaranteed and burst buckets and the pool's headroom at these levels, now."""
    script = ("redis.call('HSET', KEYS[1], ARGV[1], cmsgpack.pack(tonumber(ARGV[2]), "
              "tonumber(ARGV[3]), nil, nil, tonumber(ARGV[5]))) "
              "redis.call('HSET', KEYS[2], ARGV[1], cmsgpack.pack(tonumber(ARGV[4]), 0, "
              "tonumber(ARGV[5])))")
    limiter_client().eval(script, 2, pool_key(t.pool.pk, KEY.org, t.org.pk),
                          pool_key(t.pool.pk, KEY.pool), LAYOUT.levels, guaranteed, burst,
                          headroom, clock.now_ms())


def test_an_eta_counts_on_the_guarantee_not_on_a_burst_the_headroom_may_not_pay(queue_redis,
                                                                                 loop):
    """The org's guaranteed bucket is empty, its burst bucket holds 150 tokens, the pool's
    headroom nothing (other orgs' bursts took it; it refills at 12 tokens/s). A request of 200
    tokens is refused for its TPS: counting the burst, it would fit in 0.5 s, but the burst
    needs the headroom, which other orgs may keep taking. Its guarantee (100 tokens/s) alone
    pays it in 2 s: beyond its 1 s budget, so it is refused at once."""
    t = tenant_create(pool=PoolFactory(capacity_tps=112), guaranteed_tps=100, burst_tps=200)
    levels_set(t, guaranteed=0, burst=150, headroom=0)
    outcome = loop.run(ask(t, budget_ms=1000))
    assert outcome.decision.outcome == "tps_exceeded" and outcome.queued_ms is None
    assert 1900 < outcome.eta_ms <= 2000
    assert waiting(queue_redis, t.pool.pk) == 0


def test_a_pump_stopped_at_its_limit_goes_on_at_once(queue_redis, loop):
    """One decision per pump: four waiters that fit one after the other (20 tokens each at
    100 tokens/s) are each admitted by a pump of its own, the next one at once, never left for
    their deadline."""
    t = tenant_create(guaranteed_tps=100, burst_tps=100)
    levels_set(t, guaranteed=0, burst=0, headroom=0)
    queue_configure(QueueConfig(pump_max=1))
    try:
        outcomes = together(loop, *(
            ask(t, budget_ms=5000, request_id=f"w{i}", input_tokens=10, max_output_tokens=10)
            for i in range(4)))
    finally:
        queue_configure(QueueConfig())
    assert [o.decision.outcome for o in outcomes] == ["allowed"] * 4
    assert all(o.queued_ms is not None for o in outcomes)
