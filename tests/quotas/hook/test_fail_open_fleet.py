"""Failing open, the whole fleet admits an org at most at its guaranteed rate: three processes
with Redis stopped admit together what one bucket at the guaranteed rate holds, not three
times it (each takes rate / 3, the fleet size it learned from heartbeats while Redis was up).

The limiter clock is frozen (forked processes inherit it), so no bucket refills: what the
processes admit is exactly the buckets' capacity, and the figure does not depend on timing.
"""

import multiprocessing as mp
import threading
import time

import pytest

from quotas.hook import fail_open
from quotas.hook.gateway_tokens import GatewayIdentity
from quotas.hook.hook import authorize_handle
from quotas.hook.routing import pool_routes_reload
from quotas.limiter.connection import limiter_reset
from quotas.limiter.state import BUCKET_SECONDS
from quotas.models import LimiterFailurePolicy
from tests.aio import LoopThread
from tests.factories import PoolFactory
from tests.private_redis import PrivateRedis
from tests.quotas.conftest import tenant_create

pytestmark = pytest.mark.django_db
PROCESSES = 3
GUARANTEED_TPS = 100
COST = 10
GATEWAY = GatewayIdentity(token_id=0, name="test")


def _authorize(loop, t, request_id):
    return loop.run(authorize_handle({"request_id": request_id, "api_key": t.plaintext,
                             "model": t.pool.model, "input_tokens": COST - 1,
                             "max_output_tokens": 1}, GATEWAY))


def _process(index, t, rounds, up_done, redis_stopped, out):
    """Two decisions while Redis is up, one per round: by the second each process's heartbeat
    counts all of them. Then, Redis stopped, take every token this process's bucket admits."""
    loop = LoopThread()  # this process's own, as a worker's
    try:
        for n in range(2):
            rounds.wait()
            assert _authorize(loop, t, f"p{index}-up{n}")[0] == 200
        for n in range(500):  # heartbeats run in the background: until one has counted all
            if fail_open._fleet.size == PROCESSES:
                break
            time.sleep(0.01)
            assert _authorize(loop, t, f"p{index}-more{n}")[0] == 200
        up_done.wait()
        redis_stopped.wait()
        admitted = 0
        while True:
            status, body = _authorize(loop, t, f"p{index}-{admitted}")
            if status != 200:
                assert body["error"]["code"] == "tps_exceeded", body
                break
            assert body["limiter"] == "fail_open", body
            admitted += body["reserved_tokens"]
        out.put(admitted)
    except BaseException as exc:  # reported to the test, which fails on it
        out.put(repr(exc))


@pytest.fixture
def server(tmp_path, settings, limiter_clock, monkeypatch):
    started = PrivateRedis(tmp_path).start()
    settings.REDIS_URL = started.url
    limiter_reset()
    fail_open.fail_open_reset()
    # A heartbeat on every decision.
    monkeypatch.setattr(fail_open, "HEARTBEAT_SECONDS", 0, raising=False)
    yield started
    started.stop()
    limiter_reset()


def test_three_processes_failing_open_admit_one_guaranteed_bucket_together(server):
    t = tenant_create(pool=PoolFactory(limiter_failure_policy=LimiterFailurePolicy.FAIL_OPEN),
                      guaranteed_tps=GUARANTEED_TPS, burst_tps=2 * GUARANTEED_TPS,
                      daily_tokens=10**9, max_concurrency=10**6)
    pool_routes_reload()
    # Read the caller from PostgreSQL here, before forking: the children inherit it and never
    # touch this process's database connection.
    fail_open._caller(t.plaintext, t.pool.pk)
    context = mp.get_context("fork")
    rounds, up_done = context.Barrier(PROCESSES), context.Barrier(PROCESSES + 1)
    redis_stopped, out = context.Event(), context.Queue()
    children = [context.Process(target=_process,
                                args=(i, t, rounds, up_done, redis_stopped, out))
                for i in range(PROCESSES)]
    for child in children:
        child.start()
    try:
        try:
            up_done.wait(timeout=60)
        except threading.BrokenBarrierError:  # a child failed: say how
            pytest.fail(f"a process failed: {[out.get(timeout=5) for _ in range(out.qsize())]}")
        server.stop()
        redis_stopped.set()
        admitted = [out.get(timeout=60) for _ in children]
    finally:
        for child in children:
            child.join(timeout=10)
            if child.is_alive():
                child.kill()
    assert all(isinstance(a, int) for a in admitted), admitted
    guaranteed_bucket = GUARANTEED_TPS * BUCKET_SECONDS
    # Each process's share is a third; its bucket admits whole requests of COST.
    assert sum(admitted) <= guaranteed_bucket
    assert sum(admitted) >= guaranteed_bucket - PROCESSES * COST
