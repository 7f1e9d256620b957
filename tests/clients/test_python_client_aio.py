"""The asyncio client against the real service: report_usage never waits, batches leave in the
background, and an outage loses nothing (the same disk spool as the sync client's)."""


import httpx
import pytest
from sluice_client.aio import AsyncSluiceClient

from metering.models import UsageEvent as StoredEvent
from tests.aio import run_async

# The sync client's live-service fixture, used by name (hence F401/F811 below).
from tests.clients.test_python_client import _dead_url, service, usage  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


class CountingTransport(httpx.AsyncHTTPTransport):
    def __init__(self):
        super().__init__()
        self.paths: list[str] = []

    async def handle_async_request(self, request):
        self.paths.append(request.url.path)
        return await super().handle_async_request(request)


def test_usage_leaves_in_batches_off_the_request_path(service, tmp_path):  # noqa: F811
    url, token, t = service
    transport = CountingTransport()

    async def run():
        async with AsyncSluiceClient(url, token=token, spool_path=str(tmp_path / "u.jsonl"),
                                     transport=transport, flush_interval=3600,
                                     batch_size=5) as sluice:
            grants = [await sluice.authorize(request_id=f"a{i}", api_key=t.plaintext,
                                             model=t.pool.model, input_tokens=10,
                                             max_output_tokens=100) for i in range(2)]
            assert all(g.allowed for g in grants)
            calls = len(transport.paths)
            for i, g in enumerate(grants * 6):  # 12 events: 2 unique, 10 duplicates
                sluice.report_usage(usage(f"a{i % 2}", g.reservation_id))
            assert len(transport.paths) == calls  # nothing sent by report_usage itself
            assert sluice.pending == 12
        return transport.paths.count("/api/gateway/v1/usage")

    # A full batch of 5 wakes the sender; close() sends the rest: 12 events in 3 calls.
    assert run_async(run()) == 3
    assert StoredEvent.objects.filter(request_id__in=["a0", "a1"]).count() == 2


def test_an_outage_loses_no_usage(service, tmp_path):  # noqa: F811
    url, token, t = service
    spool = str(tmp_path / "u.jsonl")

    async def authorize_then_report_offline():
        async with AsyncSluiceClient(url, token=token, spool_path=spool,
                                     flush_interval=3600) as online:
            grant = await online.authorize(request_id="o1", api_key=t.plaintext,
                                           model=t.pool.model, input_tokens=10)
        async with AsyncSluiceClient(_dead_url(), token=token, spool_path=spool, retries=1,
                                     flush_interval=3600) as offline:
            offline.report_usage(usage("o1", grant.reservation_id))
        return offline

    offline = run_async(authorize_then_report_offline())
    assert len(offline.spool) == 1 and StoredEvent.objects.count() == 0

    async def back_again():
        async with AsyncSluiceClient(url, token=token, spool_path=spool,
                                     flush_interval=3600) as back:
            await back.flush()
        return back

    assert len(run_async(back_again()).spool) == 0
    assert StoredEvent.objects.filter(request_id="o1").count() == 1
