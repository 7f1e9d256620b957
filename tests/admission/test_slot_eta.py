"""The ETA of a request waiting for a concurrency slot (queue.lua, slot_eta): from what the
org's leases say of their ends, the waiters ahead, and a plain reservation's expiry. Real
Redis, the real clock: the leases' progress is written relative to it, and the ETAs asserted
are what that progress implies, within the milliseconds the test itself takes."""

import asyncio

import pytest

from quotas.limiter.clock import clock
from quotas.limiter.connection import limiter_client
from quotas.limiter.engine import LeaseNamed, limiter_leases_update
from quotas.limiter.schema import KEY, RESERVATION, pool_key
from tests.admission.test_hook_queue import slot_hold
from tests.admission.test_queue import ask, waiting
from tests.aio import limiter_authorize
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
        for _ in range(1000):
            if waiting(queue_redis, t.pool.pk) == 1:
                break
            await asyncio.sleep(0.01)
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
        for _ in range(1000):
            if waiting(queue_redis, t.pool.pk) == 1:
                break
            await asyncio.sleep(0.01)
        await release(t, "held", progress=60)
        return await waiter

    outcome = loop.run(run())
    assert outcome.decision.outcome == "allowed" and outcome.queued_ms is not None
    assert 0 < outcome.eta_ms <= 300
