"""Authorize through the production server process (uvicorn, decided on its event loops), as
a gateway calls it: the official Python client, hundreds of decisions in flight across two
worker processes, exact limits, and usage reported after them."""

import asyncio
import json
import socket
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from sluice_client import UsageEvent
from sluice_client.aio import AsyncSluiceClient

from metering.models import UsageEvent as StoredEvent
from quotas.hook.gateway_tokens import gateway_token_create
from quotas.limiter.connection import limiter_client
from quotas.limiter.schema import KEY, pool_key
from tests.aio import run_async
from tests.quotas.conftest import tenant_create
from tests.server import sluice_server

pytestmark = pytest.mark.django_db(transaction=True)  # the server's processes read the rows
PATH = "/api/gateway/v1/authorize"


@pytest.fixture
def server(redis_client):
    with sluice_server(workers=2, threads=4) as started:
        yield started


def _client(base, token, tmp_path) -> AsyncSluiceClient:
    return AsyncSluiceClient(base, token=token, spool_path=str(tmp_path / "spool.jsonl"),
                             timeout=30, retries=0, flush_interval=0.05)


def test_two_workers_racing_admit_exactly_the_concurrency_then_usage_frees_it(server,
                                                                               tmp_path):
    base, _ = server
    t = tenant_create(guaranteed_tps=10**7, burst_tps=10**7, daily_tokens=10**9,
                      max_concurrency=12)
    _, token = gateway_token_create(name="edge-server", actor="test")

    async def gateway():
        async with _client(base, token, tmp_path) as sluice:
            async def one(n):
                return n, await sluice.authorize(request_id=f"r{n}", api_key=t.plaintext,
                                                 model=t.pool.model, input_tokens=10,
                                                 max_output_tokens=20)
            decided = await asyncio.gather(*(one(n) for n in range(200)))
            admitted = [n for n, d in decided if d.allowed]
            refused = {d.error_code for _, d in decided if not d.allowed}
            started = datetime.now(UTC) - timedelta(seconds=2)  # the server's clock
            for n in admitted:
                sluice.report_usage(UsageEvent(
                    request_id=f"r{n}", reservation_id=dict(decided)[n].reservation_id,
                    input_tokens=10, output_tokens=5, status="completed", started_at=started,
                    first_token_at=started + timedelta(milliseconds=20),
                    finished_at=started + timedelta(seconds=1)))
            await sluice.flush()
            after = await sluice.authorize(request_id="after", api_key=t.plaintext,
                                           model=t.pool.model, input_tokens=10,
                                           max_output_tokens=20)
            return admitted, refused, after
    admitted, refused, after = run_async(gateway())
    assert len(admitted) == 12 and refused == {"concurrency_exceeded"}
    assert StoredEvent.objects.filter(org=t.org).count() == 12  # durable, then settled
    assert after.allowed  # the settled requests freed their slots
    assert limiter_client().zcard(pool_key(t.pool.pk, KEY.inflight, t.org.pk)) == 1


def test_the_servers_answers_keep_their_http_details(server):
    base, _ = server
    t = tenant_create(guaranteed_tps=10**6, burst_tps=10**6, daily_tokens=10**9,
                      max_concurrency=10)
    _, token = gateway_token_create(name="edge-http", actor="test")
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}) as client:
        ok = client.post(PATH, json={"request_id": "h1", "api_key": t.plaintext,
                                     "model": t.pool.model, "input_tokens": 1})
        assert ok.status_code == 200 and ok.json()["allowed"] is True
        assert ok.headers["content-type"] == "application/json"
        assert ok.headers["x-content-type-options"] == "nosniff"
        assert int(ok.headers["content-length"]) == len(ok.content)
        chunked = client.post(PATH, content=iter([ok.request.content[:10],
                                                  ok.request.content[10:]]))
        assert chunked.json()["reservation_id"] == ok.json()["reservation_id"]  # a retry
        assert client.get(PATH).status_code == 405
        bad_host = client.post(PATH, json={}, headers={"Host": "evil.example"})
        assert bad_host.status_code == 400 and bad_host.json()["error"]["code"] == "bad_host"


def _response(sock) -> tuple[int, bytes]:
    """The next HTTP/1.1 answer on `sock` (status, body read by its Content-Length)."""
    data = b""
    while True:
        head, sep, body = data.partition(b"\r\n\r\n")
        if sep:
            lines = head.split(b"\r\n")
            length = next(int(line.split(b":", 1)[1]) for line in lines[1:]
                          if line.lower().startswith(b"content-length:"))
            if len(body) >= length:
                return int(lines[0].split()[1]), body[:length]
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection"
        data += chunk


def test_one_connection_carries_request_after_request_whose_bodies_were_read_by_length(server):
    # Bodies are read up to their Content-Length, not to the end of the stream the server
    # reports one receive() later (sluice/asgi_bridge.py): the connection must stay usable.
    base, _ = server
    t = tenant_create(guaranteed_tps=10**6, burst_tps=10**6, daily_tokens=10**9,
                      max_concurrency=10)
    _, token = gateway_token_create(name="edge-keepalive", actor="test")
    host, port = base.removeprefix("http://").split(":")

    def post(path: str, body: bytes) -> bytes:
        return (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {token}"
                f"\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                ).encode() + body

    with socket.create_connection((host, int(port)), timeout=30) as sock:
        for n in range(3):  # authorize on the loop, then usage in the threads
            body = json.dumps({"request_id": f"ka{n}", "api_key": t.plaintext,
                               "model": t.pool.model, "input_tokens": 1}).encode()
            sock.sendall(post(PATH, body))
            status, answer = _response(sock)
            assert status == 200 and json.loads(answer)["allowed"] is True
            sock.sendall(post("/api/gateway/v1/usage", b'{"events": "none"}'))
            status, answer = _response(sock)
            assert status == 400 and json.loads(answer)["error"]["code"]


@pytest.mark.parametrize("path", [PATH, "/api/gateway/v1/usage"])
def test_a_declared_length_past_the_limit_is_answered_413_without_its_body(server, path):
    """Headers declaring a body past DATA_UPLOAD_MAX_MEMORY_SIZE, and no body: the answer comes
    from the declared length, before a byte of the body (the server would otherwise wait for
    it until its own timeout)."""
    base, _ = server
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer "
                     f"gw_000000000000_nope\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {10**9}\r\n\r\n".encode())
        status, answer = _response(sock)  # the body never comes: only its length can tell
    assert status == 413
    assert json.loads(answer)["error"]["code"] == "request_too_large"
