"""POST /api/gateway/v1/authorize/batch over HTTP, against real PostgreSQL and Redis, and the
asyncio client that sends the authorizes of one turn of its loop there."""

import asyncio

import httpx
import pytest
from sluice_client.aio import AsyncSluiceClient

from gateway.serving import ServerThread
from quotas.hook.gateway_tokens import gateway_token_cache_clear, gateway_token_create
from quotas.hook.inputs import AUTHORIZE_BATCH_MAX
from quotas.hook.routing import pool_routes_reload
from quotas.limiter.connection import limiter_reset
from tests.aio import run_async
from tests.clients.test_python_client_aio import CountingTransport
from tests.hook import HookClient
from tests.quotas.conftest import tenant_create

pytestmark = pytest.mark.django_db(transaction=True)  # the served app's threads read rows
SINGLE = "/api/gateway/v1/authorize"
BATCH = "/api/gateway/v1/authorize/batch"


@pytest.fixture
def token(redis_client):
    limiter_reset()  # reservations of earlier runs answer their request ids
    gateway_token_cache_clear()
    _, plaintext = gateway_token_create(name="edge-batch", actor="test")
    yield plaintext
    limiter_reset()


def tenant_new(**limits):
    made = tenant_create(**limits)
    pool_routes_reload()
    return made


def ask(tenant, request_id: str, **overrides) -> dict:
    body = {"request_id": request_id, "api_key": tenant.plaintext, "model": tenant.pool.model,
            "input_tokens": 30, "max_output_tokens": 70, **overrides}
    return {k: v for k, v in body.items() if v is not None}


def shape(status: int, body: dict) -> tuple:
    """What two answers to the same request share (ids and remaining counts aside)."""
    error = body.get("error") or {}
    return status, body["allowed"], error.get("code"), sorted(body), sorted(error)


def test_each_request_is_answered_as_authorize_answers_it(token):
    tenant = tenant_new()
    gateway = HookClient(token)
    variants = [{}, {"api_key": "sk_not_a_key"}, {"model": None}, {"model": "no-such-model"},
                {"input_tokens": -1}]
    r = gateway.post(BATCH, {"requests": [ask(tenant, f"b{i}", **v)
                                          for i, v in enumerate(variants)]})
    assert r.status_code == 200
    results = r.json()["results"]
    assert [x["status"] for x in results] == [200, 401, 400, 404, 400]
    assert results[0]["body"]["allowed"] is True and results[0]["body"]["reservation_id"]
    singles = [gateway.post(SINGLE, ask(tenant, f"s{i}", **v)) for i, v in enumerate(variants)]
    assert [shape(x["status"], x["body"]) for x in results] == [
        shape(s.status_code, s.json()) for s in singles]


@pytest.mark.parametrize("body", [
    {"requests": []}, {"requests": "x"}, [], {"requests": [{}] * (AUTHORIZE_BATCH_MAX + 1)}])
def test_a_malformed_batch_is_refused_whole_and_reserves_nothing(token, body):
    t = tenant_new(max_concurrency=1)
    gateway = HookClient(token)
    if isinstance(body, dict) and body["requests"] and body["requests"][0] == {}:
        body = {"requests": [ask(t, f"m{i}") for i in range(AUTHORIZE_BATCH_MAX + 1)]}
    r = gateway.post(BATCH, body)
    assert r.status_code == 400
    assert r.json()["allowed"] is False
    assert r.json()["error"]["code"] in ("invalid_input", "malformed_request")
    # The org's one slot is free: nothing of the refused batch was reserved.
    assert gateway.post(SINGLE, ask(t, "after")).json()["allowed"] is True


def test_a_bad_gateway_token_refuses_the_batch_whole(token):
    tenant = tenant_new()
    r = HookClient("gw_nope_nope").post(BATCH, {"requests": [ask(tenant, "t1")]})
    assert r.status_code == 401
    assert r.json()["allowed"] is False
    assert r.json()["error"]["code"] == "invalid_gateway_token"


def test_racing_batches_admit_exactly_the_concurrency(token):
    t = tenant_new(guaranteed_tps=10**7, burst_tps=10**7, daily_tokens=10**9,
                      max_concurrency=7)
    gateway = HookClient(token)
    batches = [{"requests": [ask(t, f"r{b}-{i}") for i in range(10)]} for b in range(4)]
    answers = gateway.many(BATCH, batches)
    results = [x for a in answers for x in a.json()["results"]]
    assert len(results) == 40
    assert sum(x["body"]["allowed"] for x in results) == 7
    assert {x["body"]["error"]["code"] for x in results if not x["body"]["allowed"]} == {
        "concurrency_exceeded"}


def _decide(url: str, token: str, tenant, tmp_path, count: int, **client) -> list:
    async def run():
        async with AsyncSluiceClient(url, token=token, spool_path=str(tmp_path / "u.jsonl"),
                                     flush_interval=3600, **client) as sluice:
            return await asyncio.gather(*(
                sluice.authorize(request_id=f"c{n}", api_key=tenant.plaintext,
                                 model=tenant.pool.model, input_tokens=10,
                                 max_output_tokens=20) for n in range(count)))
    return run_async(run())


def test_the_client_sends_one_turns_authorizes_in_one_call(token, served_url, tmp_path):
    """Idle, the first leaves at once, alone; the rest of the turn, asked while it is in
    flight, leave together."""
    t = tenant_new(guaranteed_tps=10**7, burst_tps=10**7, daily_tokens=10**9,
                   max_concurrency=5)
    transport = CountingTransport()
    decided = _decide(served_url, token, t, tmp_path, 12, transport=transport)
    assert transport.paths == [SINGLE, BATCH]
    assert sum(d.allowed for d in decided) == 5
    assert {d.error_code for d in decided if not d.allowed} == {"concurrency_exceeded"}
    assert all(d.reservation_id for d in decided if d.allowed)


def test_a_sluice_without_batches_gets_each_authorize_alone(token, served_url, tmp_path):
    """A Sluice from before /authorize/batch (404 there; here the real one behind a proxy
    that does not know the path) answers every request all the same, and is not asked for a
    batch again."""
    async def before_batches(scope, receive, send):
        if scope["type"] != "http":
            return
        if scope["path"] == BATCH:
            status, headers, body = 404, [(b"content-type", b"application/json")], b"{}"
        else:
            request = b""
            while True:
                message = await receive()
                request += message.get("body", b"")
                if not message.get("more_body"):
                    break
            async with httpx.AsyncClient() as http:
                answer = await http.post(served_url + scope["path"], content=request,
                                         headers={k.decode(): v.decode()
                                                  for k, v in scope["headers"]
                                                  if k in (b"authorization", b"content-type")})
            status, body = answer.status_code, answer.content
            headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": status,
                    "headers": [*headers, (b"content-length", b"%d" % len(body))]})
        await send({"type": "http.response.body", "body": body})

    t = tenant_new(guaranteed_tps=10**7, burst_tps=10**7, daily_tokens=10**9,
                   max_concurrency=3)
    proxy = ServerThread(before_batches).start()
    try:
        transport = CountingTransport()
        first = _decide(proxy.url, token, t, tmp_path, 4, transport=transport)
    finally:
        proxy.stop()
    assert transport.paths == [SINGLE, BATCH] + [SINGLE] * 3
    assert sum(d.allowed for d in first) == 3


def test_queued_releases_ride_on_the_next_batch_and_free_its_slots(token, served_url,
                                                                    tmp_path):
    """A gateway ends three streams and starts three new ones: the releases queued meanwhile
    leave with the batched authorizes (no call of their own; not near the limit, nothing waits
    for them) and are applied first, so the batch's requests find the slots free. (Idle, the
    first of a turn leaves alone, at once, without them.)"""
    t = tenant_new(guaranteed_tps=10**7, burst_tps=10**7, daily_tokens=10**9,
                   max_concurrency=6)
    transport = CountingTransport()

    async def run():
        async with AsyncSluiceClient(served_url, token=token, transport=transport,
                                     spool_path=str(tmp_path / "u.jsonl"), leases=True,
                                     flush_interval=3600, release_window=3600) as sluice:
            async def three(prefix):
                return await asyncio.gather(*(
                    sluice.authorize(request_id=f"{prefix}{n}", api_key=t.plaintext,
                                     model=t.pool.model, input_tokens=10,
                                     max_output_tokens=20) for n in range(3)))
            first = await three("a")
            for grant in first:
                sluice.release(grant.lease.id, 5)
            second = await three("b")
            return first, second, dict(sluice.leases.stats)

    first, second, stats = run_async(run())
    assert all(g.allowed for g in first) and all(g.allowed for g in second)
    # No leases/release call: the releases rode on the second batch.
    assert transport.paths == [SINGLE, BATCH, SINGLE, BATCH]
    assert stats["release_rides"] == 1 and stats["released"] == 3
    # The batch was decided after the three releases: at most itself and the lone one in
    # flight (without them, six, and none left).
    assert min(int(g.headers["x-ratelimit-remaining-requests"]) for g in second[1:]) >= 3
