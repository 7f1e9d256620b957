"""The gateway client against the real service (the served application over HTTP, real
PostgreSQL and Redis). Sluice's outage is a closed port, then the served one again."""

import json
import socket
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from sluice_client import SluiceClient, SluiceUnavailable, UsageEvent

from metering.models import UsageEvent as StoredEvent
from metering.models import UsageHourly
from quotas.hook.gateway_tokens import gateway_token_cache_clear, gateway_token_create
from quotas.hook.routing import pool_routes_reload
from quotas.limiter.connection import limiter_reset
from quotas.models import Allocation
from quotas.publish import limiter_sync_pool
from tests.quotas.conftest import tenant_create

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def service(served_url, redis_client):
    limiter_reset()
    gateway_token_cache_clear()
    t = tenant_create(guaranteed_tps=1000, burst_tps=1000, daily_tokens=10**6,
                      max_concurrency=2)
    pool_routes_reload()
    _, token = gateway_token_create(name="edge", actor="test")
    yield served_url, token, t
    limiter_reset()


def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def usage(request_id, reservation_id=None):
    start = datetime.now(UTC) - timedelta(seconds=3)
    return UsageEvent(request_id=request_id, reservation_id=reservation_id, input_tokens=10,
                      output_tokens=600, status="completed", started_at=start,
                      first_token_at=start + timedelta(milliseconds=150),
                      finished_at=start + timedelta(seconds=1))


def client(url, token, tmp_path, **kwargs):
    return SluiceClient(url, token=token, spool_path=str(tmp_path / "usage.jsonl"),
                        flush_interval=3600, **kwargs)


def test_authorize_allows_refuses_and_retries_idempotently(service, tmp_path):
    url, token, t = service
    sluice = client(url, token, tmp_path)
    grant = sluice.authorize(request_id="c1", api_key=t.plaintext, model=t.pool.model,
                             input_tokens=10, max_output_tokens=100)
    assert grant.allowed and grant.org == t.org.pk and grant.reserved_tokens == 110
    assert grant.headers["x-ratelimit-remaining-requests"] == "1"
    again = sluice.authorize(request_id="c1", api_key=t.plaintext, model=t.pool.model,
                             input_tokens=10, max_output_tokens=100)
    assert again.reservation_id == grant.reservation_id
    sluice.authorize(request_id="c2", api_key=t.plaintext, model=t.pool.model,
                     input_tokens=10, max_output_tokens=100)
    refused = sluice.authorize(request_id="c3", api_key=t.plaintext, model=t.pool.model,
                               input_tokens=10, max_output_tokens=100)
    assert (refused.allowed, refused.status_code, refused.error_code) == (
        False, 429, "concurrency_exceeded")
    sluice.close()


def test_contract_2_fields(service, tmp_path):
    url, token, t = service
    sluice = client(url, token, tmp_path)
    grant = sluice.authorize(request_id="n1", api_key=t.plaintext, model=t.pool.model,
                             input_tokens=10, service_tier="priority")  # no max_output_tokens
    assert grant.allowed and grant.service_tier == "priority"
    assert grant.pool == {"id": t.pool.pk, "model": t.pool.model, "region": t.pool.region,
                          "tier": "fast"}
    assert (grant.reserved_input_tokens, grant.reserved_output_tokens) == (
        10, t.pool.output_estimate_default)
    refused = sluice.authorize(request_id="n2", api_key=t.plaintext, model=t.pool.model,
                               input_tokens=10, service_tier="default")
    assert (refused.allowed, refused.error_code, refused.retryable) == (
        False, "unknown_model", False)
    start = datetime.now(UTC) - timedelta(seconds=3)
    sluice.report_usage(UsageEvent(request_id="n1", reservation_id=grant.reservation_id,
                                   input_tokens=10, cached_input_tokens=4, output_tokens=5,
                                   status="completed", started_at=start,
                                   finished_at=start + timedelta(seconds=1)))
    sluice.flush()
    assert StoredEvent.objects.get(request_id="n1").cached_input_tokens == 4
    sluice.close()


def test_usage_is_batched_and_settles(service, tmp_path):
    url, token, t = service
    sluice = client(url, token, tmp_path)
    for i in range(2):
        grant = sluice.authorize(request_id=f"u{i}", api_key=t.plaintext, model=t.pool.model,
                                 input_tokens=10, max_output_tokens=1000)
        sluice.report_usage(usage(f"u{i}", grant.reservation_id))
    sluice.report_usage(usage("u0", None))  # a retry: acknowledged, not counted
    sluice.flush()
    assert StoredEvent.objects.count() == 2
    assert UsageHourly.objects.get().output_tokens == 1200
    assert len(sluice.spool) == 0
    sluice.close()


def test_an_outage_loses_no_usage(service, tmp_path):
    url, token, t = service
    online = client(url, token, tmp_path)
    grants = [online.authorize(request_id=f"o{i}", api_key=t.plaintext, model=t.pool.model,
                               input_tokens=10, max_output_tokens=1000) for i in range(2)]
    online.close()
    offline = client(_dead_url(), token, tmp_path, retries=1)
    with pytest.raises(SluiceUnavailable):
        offline.authorize(request_id="x", api_key=t.plaintext, model=t.pool.model,
                          input_tokens=1, max_output_tokens=1)
    for i, grant in enumerate(grants):
        offline.report_usage(usage(f"o{i}", grant.reservation_id))
    offline.close()  # could not deliver: both events are on disk
    assert len(offline.spool) == 2 and StoredEvent.objects.count() == 0
    # Sluice is back; a new gateway process with the same spool replays it.
    back = client(url, token, tmp_path)
    back.flush()
    assert sorted(StoredEvent.objects.values_list("request_id", flat=True)) == ["o0", "o1"]
    assert len(back.spool) == 0
    back.close()


def test_events_sluice_rejects_for_good_go_to_the_dead_file(service, tmp_path):
    url, token, t = service
    sluice = client(url, token, tmp_path)
    sluice.report_usage(usage("never-authorized"))
    sluice.flush()
    assert len(sluice.spool) == 0
    assert "never-authorized" in sluice.spool.dead.read_text()
    sluice.close()


class _PoisonedService(httpx.HTTPTransport):
    """The live service, except that it fails (HTTP 500) on any usage batch holding a request
    id starting with "poison": a server-side defect the client meets in one event."""

    def handle_request(self, request):
        if request.url.path.endswith("/usage") and b'"request_id":"poison' in request.read():
            return httpx.Response(500, json={"error": {"code": "internal_error",
                                                       "message": "boom"}})
        return super().handle_request(request)


def _grants(sluice, t, *request_ids):
    # The service's tenant serves two requests at once: these are in flight together.
    Allocation.objects.filter(pk=t.allocation.pk).update(max_concurrency=len(request_ids))
    limiter_sync_pool(pool_id=t.pool.pk)
    return {rid: sluice.authorize(request_id=rid, api_key=t.plaintext, model=t.pool.model,
                                  input_tokens=10, max_output_tokens=1000).reservation_id
            for rid in request_ids}


def _dead_letters(sluice) -> dict[str, str]:
    lines = Path(sluice.dead_letter_path).read_text().splitlines()
    return {e["request_id"]: e["sluice_error"]["code"] for e in map(json.loads, lines)}


def test_one_poisoned_event_never_wedges_the_spool(service, tmp_path):
    url, token, t = service
    sluice = client(url, token, tmp_path, retries=0, transport=_PoisonedService())
    grants = _grants(sluice, t, "a", "b", "c", "poison-1", "poison-2", "d")
    # A batch Sluice failed on before (spooled), then more usage queued after it.
    sluice.spool.append([usage(rid, grants[rid]).as_json()
                         for rid in ("a", "poison-1", "poison-2", "b")])
    for rid in ("c", "d"):
        sluice.report_usage(usage(rid, grants[rid]))
    sluice.flush()
    assert sorted(StoredEvent.objects.values_list("request_id", flat=True)) == [
        "a", "b", "c", "d"]
    assert len(sluice.spool) == 0
    assert _dead_letters(sluice) == {"poison-1": "server_error", "poison-2": "server_error"}
    sluice.close()


def test_a_batch_refused_as_malformed_loses_only_its_bad_events(service, tmp_path):
    url, token, t = service
    sluice = client(url, token, tmp_path)
    grants = _grants(sluice, t, "a", "b")
    bad = {**usage("bad", None).as_json(), "input_tokens": -1}
    for event in (usage("a", grants["a"]).as_json(), bad, usage("b", grants["b"]).as_json()):
        sluice.report_usage(event)
    sluice.flush()
    assert sorted(StoredEvent.objects.values_list("request_id", flat=True)) == ["a", "b"]
    assert _dead_letters(sluice) == {"bad": "invalid_input"} and len(sluice.spool) == 0
    sluice.close()


def test_a_proxy_s_503_keeps_the_batch_for_later(service, tmp_path):
    url, token, t = service

    class Down(httpx.HTTPTransport):
        def handle_request(self, request):
            return httpx.Response(503, text="upstream unavailable")

    grants = _grants(client(url, token, tmp_path), t, "a")
    sluice = client(url, token, tmp_path, retries=0, transport=Down())
    sluice.report_usage(usage("a", grants["a"]))
    sluice.flush()
    assert len(sluice.spool) == 1 and not Path(sluice.dead_letter_path).exists()
    sluice.close()


def test_a_sluice_failing_on_everything_dead_letters_nothing(service, tmp_path):
    url, token, t = service

    class Failing(httpx.HTTPTransport):
        def handle_request(self, request):
            if request.url.path.endswith("/usage"):
                return httpx.Response(500, json={"error": {"code": "internal_error",
                                                           "message": "boom"}})
            return super().handle_request(request)

    grants = _grants(client(url, token, tmp_path), t, "a", "b", "c")
    sluice = client(url, token, tmp_path, retries=0, transport=Failing())
    for rid in ("a", "b", "c"):
        sluice.report_usage(usage(rid, grants[rid]))
    sluice.flush()  # the queued batch fails, is spooled, and the replay fails again
    assert len(sluice.spool) == 3 and not Path(sluice.dead_letter_path).exists()
    sluice.close()
