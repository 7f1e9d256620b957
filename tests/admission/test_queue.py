"""The admission queue's engine (admission/engine): decisions on a real Redis, waiters on
real event loops, time passing for real (the buckets refill while they wait). Outcomes and
order are asserted, never how long anything took."""

import asyncio
import uuid

import pytest

from admission.engine.queue import QKEY, queue_key
from admission.engine.waiting import queue_decide
from quotas.limiter.schema import KEY
from sluice.secrets import secret_digest
from tests.admission.test_hook_queue import slot_hold
from tests.aio import limiter_authorize
from tests.factories import PoolFactory
from tests.quotas.conftest import tenant_create

pytestmark = pytest.mark.django_db(transaction=True)


def ask(tenant, *, budget_ms, input_tokens=100, max_output_tokens=100, request_id=None,
        max_wait_ms=20_000, gone=None):
    return queue_decide(pool_id=tenant.pool.pk, digest=secret_digest(tenant.plaintext),
                        request_id=request_id or uuid.uuid4().hex, input_tokens=input_tokens,
                        max_output_tokens=max_output_tokens, tier="auto", key_tier="unknown",
                        pool_tier=tenant.pool.tier, budget_ms=budget_ms,
                        max_wait_ms=max_wait_ms, gone=gone)


def drain(tenant, tokens: int) -> None:
    """Take `tokens` from the org's buckets with a plain decision."""
    d = limiter_authorize(pool_id=tenant.pool.pk, api_key=tenant.plaintext,
                          request_id=uuid.uuid4().hex, input_tokens=tokens // 2,
                          max_output_tokens=tokens - tokens // 2)
    assert d.allowed, d


def waiting(redis, pool_id) -> int:
    return int(redis.hget(queue_key(pool_id, QKEY.meta), "n") or 0)


async def until_waiting(redis, pool_id) -> None:
    """Until one request waits in the pool's queue (joins are script calls on the loop)."""
    for _ in range(1000):
        if waiting(redis, pool_id) == 1:
            return
        await asyncio.sleep(0.01)


def test_a_request_that_fits_is_admitted_at_once(queue_redis, loop):
    tenant = tenant_create(guaranteed_tps=1000, burst_tps=1000)
    outcome = loop.run(ask(tenant, budget_ms=1000))
    assert outcome.decision.outcome == "allowed"
    assert outcome.queued_ms is None


def together(loop, *coroutines):
    async def run():
        return await asyncio.gather(*coroutines)
    return loop.run(run())


def test_waiters_are_admitted_as_their_bucket_refills_first_come_first(queue_redis, loop):
    tenant = tenant_create(guaranteed_tps=100, burst_tps=100)
    drain(tenant, 1000)
    ids = [f"r{i}" for i in range(3)]  # 300 tokens at 100/s
    outcomes = together(loop, *(ask(tenant, budget_ms=10_000, request_id=r, input_tokens=50,
                                    max_output_tokens=50) for r in ids))
    assert [o.decision.outcome for o in outcomes] == ["allowed"] * 3
    waited = [o for o in outcomes if o.queued_ms is not None]
    assert waited and all(o.eta_ms <= 10_000 for o in waited)
    assert waiting(queue_redis, tenant.pool.pk) == 0


def test_an_eta_beyond_the_budget_is_refused_up_front_and_nothing_waits(queue_redis, loop):
    tenant = tenant_create(guaranteed_tps=100, burst_tps=100)
    drain(tenant, 1000)
    outcome = loop.run(ask(tenant, budget_ms=100))  # 200 tokens at 100/s: 2 s
    assert outcome.decision.outcome == "tps_exceeded"
    assert outcome.eta_ms > 100 and outcome.decision.retry_after_ms == outcome.eta_ms
    assert outcome.queued_ms is None
    assert waiting(queue_redis, tenant.pool.pk) == 0
    assert not queue_redis.exists(queue_key(tenant.pool.pk, KEY.queue_orgs))


def test_a_waiter_nobody_makes_room_for_is_refused_when_its_budget_ends(queue_redis, loop):
    tenant = tenant_create(guaranteed_tps=1000, burst_tps=1000, max_concurrency=1)
    slot_hold(tenant, "held")  # says it ends in 0.3 s, and holds the one slot for good
    outcome = loop.run(ask(tenant, budget_ms=1200))
    assert outcome.decision.outcome == "queue_timeout"
    assert outcome.queued_ms is not None
    assert waiting(queue_redis, tenant.pool.pk) == 0


def test_no_budget_is_todays_answer(queue_redis, loop):
    tenant = tenant_create(guaranteed_tps=100, burst_tps=100)
    drain(tenant, 1000)
    outcome = loop.run(ask(tenant, budget_ms=0))
    assert outcome.decision.outcome == "tps_exceeded"
    assert outcome.eta_ms is None and waiting(queue_redis, tenant.pool.pk) == 0


def test_the_pools_maximum_clamps_the_budget(queue_redis, loop):
    tenant = tenant_create(guaranteed_tps=100, burst_tps=100)
    drain(tenant, 1000)
    outcome = loop.run(ask(tenant, budget_ms=20_000, max_wait_ms=500))
    assert outcome.decision.outcome == "tps_exceeded" and outcome.budget_ms == 500


def jain(values: list[float]) -> float:
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values))


def test_orgs_competing_for_the_headroom_get_shares_by_their_guarantees(queue_redis, loop):
    """Guarantees 10 : 20 : 50 tokens/s, each org bursting up to 1,000 tokens/s into a pool
    whose headroom (1,000 tokens/s) is what they fight for: each keeps six requests waiting,
    back to back. Counted once every bucket is drained: admitted tokens by org ~ 1 : 2 : 5."""
    pool = PoolFactory(capacity_tps=1080, queue_max_wait_ms=20_000)
    orgs = [tenant_create(pool=pool, guaranteed_tps=g, burst_tps=g + 1000, max_concurrency=10**6,
                          daily_tokens=10**9, sync=False) for g in (10, 20, 50)]
    from quotas.publish import limiter_sync_pool
    limiter_sync_pool(pool_id=pool.pk)
    # The initial bucket levels, spent: the guarantees' 10 s, and the headroom's (with the
    # largest org's burst). What follows is the steady state.
    for t, tokens in zip(orgs, (100, 200, 500 + 10_000), strict=True):
        drain(t, tokens)
    admitted = {t.org.pk: [] for t in orgs}
    stop = asyncio.Event()

    async def worker(t):
        while not stop.is_set():
            outcome = await ask(t, budget_ms=20_000, input_tokens=10, max_output_tokens=10)
            if outcome.decision.allowed:
                admitted[t.org.pk].append(asyncio.get_running_loop().time())

    async def run():
        tasks = [asyncio.ensure_future(worker(t)) for t in orgs for _ in range(6)]
        while sum(map(len, admitted.values())) < 400:  # until 400 admissions, however long
            await asyncio.sleep(0.05)
        stop.set()
        await asyncio.wait(tasks, timeout=30)

    loop.run(run(), timeout=300)
    # The first quarter left out: what refilled while the workers started came first served.
    everything = sorted(at for ats in admitted.values() for at in ats)
    start = everything[len(everything) // 4]
    counts = [sum(1 for at in admitted[t.org.pk] if at >= start) for t in orgs]
    shares = [c / sum(counts) for c in counts]
    assert jain([s / w for s, w in zip(shares, (1, 2, 5), strict=True)]) >= 0.95, counts


def test_a_key_held_by_its_own_slice_never_blocks_its_orgs_other_keys(queue_redis, loop):
    from orgs.services.api_keys import KeySlice, api_key_create, api_key_limits_set
    from quotas.publish import limiter_sync_pool

    t = tenant_create(guaranteed_tps=1000, burst_tps=1000)
    slow_key, slow = api_key_create(org=t.org, name="slow", actor="test")
    api_key_limits_set(key=slow_key, key_slice=KeySlice(output_tps=10),
                       default_service_tier="auto", actor="test")
    limiter_sync_pool(pool_id=t.pool.pk)
    d = limiter_authorize(pool_id=t.pool.pk, api_key=slow, request_id="slow-drain",
                          input_tokens=50, max_output_tokens=50)  # the slice's 100 tokens
    assert d.allowed, d
    slow_tenant = type(t)(org=t.org, pool=t.pool, allocation=t.allocation, key=slow_key,
                          plaintext=slow)

    async def run():
        held = asyncio.ensure_future(ask(slow_tenant, budget_ms=20_000, request_id="held",
                                         input_tokens=25, max_output_tokens=25))
        await until_waiting(queue_redis, t.pool.pk)
        assert waiting(queue_redis, t.pool.pk) == 1
        other = await ask(t, budget_ms=20_000, request_id="other")  # the org's other key
        still = waiting(queue_redis, t.pool.pk)
        held.cancel()  # its client goes away: it leaves the queue
        await asyncio.gather(held, return_exceptions=True)
        return other, still

    other, still = loop.run(run())
    assert other.decision.outcome == "allowed"
    assert still == 1  # the held key's request still waits behind its own slice
    assert waiting(queue_redis, t.pool.pk) == 0


def test_a_retry_of_a_waiting_request_keeps_its_one_place(queue_redis, loop):
    tenant = tenant_create(guaranteed_tps=1000, burst_tps=1000, max_concurrency=1)
    slot_hold(tenant, "held")  # holds the one slot

    async def run():
        first = asyncio.ensure_future(ask(tenant, budget_ms=1500, request_id="same"))
        await until_waiting(queue_redis, tenant.pool.pk)
        again = asyncio.ensure_future(ask(tenant, budget_ms=1500, request_id="same"))
        await asyncio.sleep(0.1)
        count = waiting(queue_redis, tenant.pool.pk)
        return count, await first, await again

    count, first, again = loop.run(run())
    assert count == 1
    assert first.decision.outcome == again.decision.outcome == "queue_timeout"


def test_the_consoles_dashboard_shows_each_pools_queue_now(queue_redis, loop):
    from tests.console.conftest import _staff_in
    from tests.totp import console_client

    tenant = tenant_create(guaranteed_tps=1000, burst_tps=1000, max_concurrency=1)
    tenant.pool.queue_max_wait_ms = 20_000
    tenant.pool.save()
    slot_hold(tenant, "held")  # holds the one slot
    client = console_client(_staff_in("operator"))
    held = asyncio.run_coroutine_threadsafe(ask(tenant, budget_ms=20_000, request_id="w1"),
                                            loop.loop)
    loop.run(until_waiting(queue_redis, tenant.pool.pk))
    page = client.get("/admin/").content.decode()
    loop.loop.call_soon_threadsafe(held.cancel)
    assert 'data-field="admission-queue">1 <small>requests waiting (200 tokens) from 1 org;' in (
        page)
