"""The queue's order is central: two production servers (two processes, config/serve.py) wait
on one pool's queue, and a Redis restart answers every waiter at once by the pool's policy."""

import asyncio
import uuid

import httpx
import pytest

from admission.engine.queue import QKEY, queue_key
from admission.engine.waiting import queue_decide
from quotas.hook.gateway_tokens import gateway_token_cache_clear, gateway_token_create
from quotas.limiter.connection import LimiterUnavailable, limiter_client, limiter_reset
from sluice.secrets import secret_digest
from tests.admission.test_hook_queue import body, drain, queued_tenant, slot_hold
from tests.aio import shared_loop
from tests.private_redis import PrivateRedis
from tests.quotas.hook.test_on_loop import URL
from tests.server import sluice_server

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def fresh(redis_client):
    limiter_reset()
    gateway_token_cache_clear()
    yield redis_client
    limiter_reset()
    gateway_token_cache_clear()


def test_two_hook_processes_share_one_queue(fresh):
    t = queued_tenant(guaranteed_tps=200)
    _, token = gateway_token_create(name="edge-two", actor="test")
    with sluice_server() as (first, _), sluice_server() as (second, _):
        drain(t, 2000)

        async def run():
            async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"},
                                         timeout=60) as client:
                return await asyncio.gather(*(
                    client.post(f"{base}{URL}", json=body(t, queue_threshold_ms=20_000))
                    for base in [first, second] * 4))
        answers = asyncio.run(run())
    assert [a.status_code for a in answers] == [200] * 8, [a.json() for a in answers]
    waited = [i for i, a in enumerate(answers) if "queued_ms" in a.json()]
    # Waiters of both processes were admitted (a pump in either admits the other's waiters).
    assert {i % 2 for i in waited} == {0, 1}
    assert int(limiter_client().hget(queue_key(t.pool.pk, QKEY.meta), "n") or 0) == 0


def test_a_redis_restart_answers_every_waiter_at_once(tmp_path, settings, db):
    """Waiters wait on a private Redis that then stops: each is answered LimiterUnavailable
    (the hook's failure policy), long before its 20 s budget could end. Started again (empty),
    the next request is decided on the pool rebuilt."""
    server = PrivateRedis(tmp_path / "redis").start()
    settings.REDIS_URL = server.url  # the engine follows (quotas' setting_changed receiver)
    limiter_reset()
    loop = shared_loop()  # the served loop: a rebuild runs in the process's threads
    try:
        t = queued_tenant(guaranteed_tps=100, max_concurrency=1)
        slot_hold(t, "held")  # holds the one slot: the waiters wait for it

        async def one():
            try:
                await queue_decide(pool_id=t.pool.pk, digest=secret_digest(t.plaintext),
                                   request_id=uuid.uuid4().hex, input_tokens=10,
                                   max_output_tokens=10, tier="auto", key_tier="unknown",
                                   pool_tier="fast", budget_ms=20_000, max_wait_ms=20_000)
            except LimiterUnavailable:
                return "unavailable"
            return "answered"

        async def run():
            waiters = [asyncio.ensure_future(one()) for _ in range(3)]
            client = server.client()
            for _ in range(1000):  # until all three wait
                if int(client.hget(queue_key(t.pool.pk, QKEY.meta), "n") or 0) == 3:
                    break
                await asyncio.sleep(0.01)
            server.stop()
            done, pending = await asyncio.wait(waiters, timeout=15)
            return [w.result() for w in done], len(pending)

        results, pending = loop.run(run())
        assert pending == 0 and results == ["unavailable"] * 3
        # Redis back, empty: the pool is rebuilt from PostgreSQL and requests queue again.
        server.start()
        assert loop.run(one()) == "answered"
    finally:
        server.stop()
        limiter_reset()
        loop.run(asyncio.sleep(0.01))
