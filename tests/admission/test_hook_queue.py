"""The admission queue through the hook's authorize on the production server's event loop
(config/asgi.py): the request field, the answers, a client that goes away while waiting.
The real clock: buckets refill while requests wait."""

import asyncio
import json
import uuid

import pytest

from admission.engine.queue import QKEY, queue_key
from quotas.hook.routing import pool_routes_reload
from quotas.limiter.clock import clock
from quotas.limiter.connection import limiter_client
from quotas.limiter.schema import KEY, RESERVATION, pool_key
from tests.aio import limiter_authorize
from tests.factories import PoolFactory
from tests.hook import AUTHORIZE as URL
from tests.hook import hook_client, served
from tests.quotas.conftest import tenant_create

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def app(redis_client):
    with hook_client("edge-queue") as client:
        yield client


def queued_tenant(*, max_wait_ms=10_000, guaranteed_tps=100, **limits):
    pool = PoolFactory(queue_max_wait_ms=max_wait_ms)
    t = tenant_create(pool=pool, guaranteed_tps=guaranteed_tps, burst_tps=guaranteed_tps,
                      **limits)
    pool_routes_reload()
    return t


def drain(t, tokens: int) -> None:
    d = limiter_authorize(pool_id=t.pool.pk, api_key=t.plaintext, request_id=uuid.uuid4().hex,
                          input_tokens=tokens // 2, max_output_tokens=tokens - tokens // 2)
    assert d.allowed, d


def slot_hold(t, request_id: str, *, ends_in_ms: int = 300) -> None:
    """Take one of the org's concurrency slots with a lease nobody renews or releases (it lives
    600 s), whose progress says it ends in `ends_in_ms`: half of its 100 output tokens
    delivered in as long. A request waiting for the slot is told about that ETA (queue.lua,
    slot_eta) and waits; nothing frees the slot."""
    d = limiter_authorize(pool_id=t.pool.pk, api_key=t.plaintext, request_id=request_id,
                          input_tokens=10, max_output_tokens=100, lease_owner="gw-test",
                          lease_id=f"sig-{request_id}", lease_for=f"{t.org.pk}.{t.key.pk}",
                          lease_ttl_ms=600_000)
    assert d.allowed and d.reserved_output_tokens == 100, d
    now = clock.now_ms()
    limiter_client().hset(pool_key(t.pool.pk, KEY.reservation, request_id), mapping={
        RESERVATION.started: now - ends_in_ms, RESERVATION.progress: 50,
        RESERVATION.progress_at: now})


def body(t, **extra) -> dict:
    return {"request_id": uuid.uuid4().hex, "api_key": t.plaintext, "model": t.pool.model,
            "input_tokens": 50, "max_output_tokens": 50, **extra}


def waiting(pool_id: int) -> int:
    return int(limiter_client().hget(queue_key(pool_id, QKEY.meta), "n") or 0)


@pytest.mark.parametrize("value", [-1, 1, 49, 20_001, 1.5, "100", True, [100]])
def test_a_bad_budget_is_refused_and_nothing_is_queued(app, value):
    t = queued_tenant()
    drain(t, 1000)
    r = app.authorize(body(t, queue_threshold_ms=value))
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "invalid_queue_threshold"
    assert "queue_threshold_ms" in r.json()["error"]["fields"]
    assert not limiter_client().exists(queue_key(t.pool.pk, QKEY.meta))


def test_a_bad_budget_beside_other_bad_fields_is_named_among_them(app):
    t = queued_tenant()
    r = app.authorize(body(t, queue_threshold_ms=-5, input_tokens=-1))
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_input"
    assert {"queue_threshold_ms", "input_tokens"} <= set(r.json()["error"]["fields"])


def test_a_waiter_is_admitted_and_says_how_long_it_waited(app):
    t = queued_tenant()
    drain(t, 1000)
    answers = app.many(URL, [body(t, queue_threshold_ms=10_000) for _ in range(3)])
    assert [a.status_code for a in answers] == [200] * 3
    waited = [a.json() for a in answers if "queued_ms" in a.json()]
    assert waited, [a.json() for a in answers]
    for answer in waited:
        assert answer["allowed"] is True and answer["queue_budget_ms"] == 10_000
        assert answer["headers"]["x-sluice-queued-ms"] == str(answer["queued_ms"])
    assert waiting(t.pool.pk) == 0


def test_an_eta_beyond_the_budget_is_a_429_with_the_eta(app):
    t = queued_tenant()
    drain(t, 1000)  # 100 tokens at 100/s: about a second
    r = app.authorize(body(t, queue_threshold_ms=50))
    assert r.status_code == 429
    error = r.json()["error"]
    assert error["code"] == "tps_exceeded" and error["queue_eta_ms"] > 50
    assert error["retry_after_ms"] == error["queue_eta_ms"]
    headers = r.json()["headers"]
    assert headers["retry-after-ms"] == headers["x-sluice-queue-eta-ms"] == str(
        error["queue_eta_ms"])
    assert waiting(t.pool.pk) == 0


def test_the_pools_maximum_clamps_the_budget(app):
    t = queued_tenant(max_wait_ms=60)
    drain(t, 1000)
    r = app.authorize(body(t, queue_threshold_ms=20_000))
    assert r.status_code == 429 and r.json()["queue_budget_ms"] == 60


def test_a_pool_without_a_queue_answers_as_today(app):
    t = queued_tenant(max_wait_ms=0)
    drain(t, 1000)
    r = app.authorize(body(t, queue_threshold_ms=10_000))
    assert r.status_code == 429 and r.json()["error"]["code"] == "tps_exceeded"
    assert "queue_budget_ms" not in r.json()


def test_the_orgs_default_budget_applies_when_the_request_says_nothing(app):
    t = queued_tenant(sync=False)
    t.org.queue_threshold_default_ms = 50
    t.org.save()
    from quotas.publish import limiter_sync_pool
    limiter_sync_pool(pool_id=t.pool.pk)
    drain(t, 1000)
    r = app.authorize(body(t))
    assert r.status_code == 429 and r.json()["queue_budget_ms"] == 50
    assert r.json()["error"]["queue_eta_ms"] > 50


def test_a_client_that_goes_away_leaves_the_queue_at_once(app):
    t = queued_tenant(max_concurrency=1)
    slot_hold(t, "held")  # holds the one slot
    gone = asyncio.Event()
    sent = []
    payload = json.dumps(body(t, queue_threshold_ms=10_000)).encode()

    async def call():
        done = False

        async def receive():
            nonlocal done
            if not done:
                done = True
                return {"type": "http.request", "body": payload, "more_body": False}
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message):
            sent.append(message)

        scope = {"type": "http", "method": "POST", "path": URL, "headers": [
            (b"host", b"testserver"), (b"content-type", b"application/json"),
            (b"authorization", app.headers["authorization"].encode())],
            "query_string": b"", "server": ("127.0.0.1", 80), "client": ("127.0.0.1", 1),
            "scheme": "http", "http_version": "1.1", "root_path": "",
            "asgi": {"version": "3.0"}}
        task = asyncio.ensure_future(served().app(scope, receive, send))
        for _ in range(1000):  # until it waits in the queue
            if waiting(t.pool.pk):
                break
            await asyncio.sleep(0.01)
        assert waiting(t.pool.pk) == 1
        gone.set()
        await task
        assert sent == []  # nobody to answer

    served().loop.run(call())
    assert waiting(t.pool.pk) == 0
    assert not limiter_client().exists(pool_key(t.pool.pk, KEY.queue_orgs))
