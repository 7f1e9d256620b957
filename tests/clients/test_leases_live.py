"""Both clients' leases against the real service: one heartbeat call per process per interval
whatever the number of leases, refused leases dropped, and a released slot free for the very
next authorize."""

import asyncio
import json

import httpx
import pytest
from sluice_client import SluiceClient
from sluice_client.aio import AsyncSluiceClient
from sluice_client.leases import Lease

from quotas.hook.gateway_tokens import gateway_token_cache_clear, gateway_token_create
from quotas.hook.routing import pool_routes_reload
from quotas.limiter.connection import limiter_reset
from tests.aio import run_async
from tests.clients.test_python_client import usage
from tests.quotas.conftest import tenant_create

pytestmark = pytest.mark.django_db(transaction=True)
HEARTBEAT = "/api/gateway/v1/leases/heartbeat"


def leased_service(url: str, max_concurrency: int):
    limiter_reset()
    gateway_token_cache_clear()
    t = tenant_create(guaranteed_tps=10_000, burst_tps=10_000, daily_tokens=10**8,
                      max_concurrency=max_concurrency)
    pool_routes_reload()
    _, token = gateway_token_create(name="edge", actor="test")
    return url, token, t


@pytest.fixture
def service(served_url, redis_client):
    yield leased_service(served_url, 2)
    limiter_reset()


@pytest.fixture
def wide_service(served_url, redis_client):
    yield leased_service(served_url, 50)
    limiter_reset()


class Recording(httpx.AsyncHTTPTransport):
    """The real transport, noting each heartbeat body sent."""

    def __init__(self):
        super().__init__()
        self.heartbeats: list[dict] = []

    async def handle_async_request(self, request):
        if request.url.path == HEARTBEAT:
            self.heartbeats.append(json.loads(request.content))
        return await super().handle_async_request(request)


def test_one_heartbeat_call_per_interval_whatever_the_number_of_leases(wide_service,
                                                                       tmp_path):
    url, token, t = wide_service
    transport, refused = Recording(), []

    async def run():
        async with AsyncSluiceClient(
                url, token=token, spool_path=str(tmp_path / "u.jsonl"), transport=transport,
                leases=True, heartbeat_interval=0.2, flush_interval=3600,
                on_lease_refused=lambda *r: refused.append(r)) as sluice:
            grants = [await sluice.authorize(request_id=f"h{i}", api_key=t.plaintext,
                                             model=t.pool.model, input_tokens=10,
                                             max_output_tokens=100) for i in range(30)]
            assert all(g.allowed and g.lease for g in grants)
            assert {g.lease.id for g in grants} == {g.reservation_id for g in grants}
            sluice.lease_progress(grants[0].lease.id, 42)
            sluice.leases.hold(Lease("rsv_not_a_lease", 15_000, 5_000))  # Sluice knows none
            since = len(transport.heartbeats)
            ticks = sluice.leases.stats["heartbeats"]
            # Four ticks sent and their answers read (a tick counts when it is sent).
            while (sluice.leases.stats["heartbeats"] < ticks + 4
                   or sluice.leases.stats["renewed"] < 30 * 4):
                await asyncio.sleep(0.05)
            return grants, since, dict(sluice.leases.stats), len(transport.heartbeats)

    grants, since, stats, sent = run_async(run())
    bodies = transport.heartbeats[since:]
    # One call per tick (each of these ticks held 31 leases or 30), never one per lease. A
    # next tick may have begun and not yet reached the transport.
    assert stats["heartbeat_calls"] == stats["heartbeats"]
    assert stats["heartbeats"] - 1 <= sent <= stats["heartbeats"]
    ids = {g.lease.id for g in grants}
    first, later = bodies[0], bodies[1:4]
    assert {e["id"] for e in first["leases"]} == ids | {"rsv_not_a_lease"}
    assert all({e["id"] for e in b["leases"]} == ids for b in later)  # the refused one dropped
    assert {b["gateway_process"] for b in bodies} == {first["gateway_process"]}
    assert next(e["delivered_output_tokens"] for e in first["leases"]
                if e["id"] == grants[0].lease.id) == 42
    assert refused[0][:2] == ("heartbeat", "rsv_not_a_lease")
    assert stats["heartbeat_refused"] == 1 and stats["renewed"] >= 30 * 4


def test_sync_release_frees_the_slot_for_the_next_authorize(service, tmp_path):
    url, token, t = service
    # A release window of an hour: only the authorize that waits for it sends it.
    sluice = SluiceClient(url, token=token, spool_path=str(tmp_path / "u.jsonl"),
                          flush_interval=3600, leases=True, heartbeat_interval=3600,
                          release_window=3600)

    def ask(rid):
        return sluice.authorize(request_id=rid, api_key=t.plaintext, model=t.pool.model,
                                input_tokens=10, max_output_tokens=100)

    a, b = ask("s1"), ask("s2")
    assert a.allowed and b.allowed and a.lease and b.lease
    assert ask("s3").error_code == "concurrency_exceeded"
    sluice.release(a.lease.id, 30)
    assert ask("s4").allowed  # right after: the release went first
    sluice.report_usage(usage("s2", b.reservation_id))  # a lease still held is released
    assert ask("s5").allowed
    assert ask("s6").error_code == "concurrency_exceeded"
    sluice.heartbeat()
    assert sluice.leases.stats["renewed"] == 2 and len(sluice.leases) == 2
    assert sluice.leases.stats["released"] == 2
    sluice.close()


def test_async_release_frees_the_slot_for_the_next_authorize(service, tmp_path):
    url, token, t = service

    async def run():
        async with AsyncSluiceClient(url, token=token, spool_path=str(tmp_path / "u.jsonl"),
                                     leases=True, release_window=3600,
                                     flush_interval=3600) as sluice:
            async def ask(rid):
                return await sluice.authorize(request_id=rid, api_key=t.plaintext,
                                              model=t.pool.model, input_tokens=10,
                                              max_output_tokens=100)
            a, b = await ask("r1"), await ask("r2")
            assert (await ask("r3")).error_code == "concurrency_exceeded"
            sluice.release(a.lease.id, 12)
            sluice.release(b.lease.id, 0)
            c, d = await ask("r4"), await ask("r5")
            assert c.allowed and d.allowed
            assert sluice.leases.stats["release_calls"] == 1  # both in one call
            await sluice.heartbeat()
            return dict(sluice.leases.stats)

    stats = run_async(run())
    assert stats["released"] == 2 and stats["renewed"] == 2


def test_without_leases_the_answer_and_the_calls_are_todays(service, tmp_path):
    url, token, t = service
    sluice = SluiceClient(url, token=token, spool_path=str(tmp_path / "u.jsonl"),
                          flush_interval=3600)
    grant = sluice.authorize(request_id="o1", api_key=t.plaintext, model=t.pool.model,
                             input_tokens=10)
    assert grant.allowed and grant.lease is None and sluice.leases is None
    sluice.release(grant.reservation_id)  # nothing to release: a no-op
    sluice.close()
