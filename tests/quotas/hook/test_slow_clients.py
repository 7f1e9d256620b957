"""40 clients that send an authorize's headers and one byte of its body, then nothing, do not
stall authorize: the production server (config/serve.py, a real process on a free port) reads
bodies on its event loop, so every authorize is answered while they hang on. The precise
latency figures are in bench/slow_clients.py; here only a generous comparison of medians."""

import socket
import statistics
import time

import httpx
import pytest

from quotas.hook.gateway_tokens import gateway_token_create
from tests.quotas.conftest import tenant_create
from tests.server import sluice_server

pytestmark = pytest.mark.django_db(transaction=True)  # the server process reads the rows
PATH = "/api/gateway/v1/authorize"
SLOW = 40


@pytest.fixture
def server(limiter):
    """The production server, one worker with 4 threads."""
    with sluice_server(workers=1, threads=4) as started:
        yield started


def _slow_senders(port: int, headers: str) -> list[socket.socket]:
    head = (f"POST {PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}"
            "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{").encode()
    sockets = []
    for _ in range(SLOW):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(head)
        sockets.append(s)
    return sockets


def _authorize_times(client, t, tag: str) -> list[float]:
    seconds = []
    for n in range(20):
        started = time.perf_counter()
        answer = client.post(PATH, json={"request_id": f"{tag}-{n}", "api_key": t.plaintext,
                                         "model": t.pool.model, "input_tokens": 9,
                                         "max_output_tokens": 1})
        seconds.append(time.perf_counter() - started)
        assert answer.status_code == 200, answer.text
    return seconds


def test_authorize_is_answered_while_forty_clients_trickle_their_bodies(server):
    base, port = server
    t = tenant_create(guaranteed_tps=10**6, burst_tps=10**6, daily_tokens=10**12,
                      max_concurrency=10**6)
    _, token = gateway_token_create(name="edge", actor="test")
    auth = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=base, headers=auth, timeout=30) as client:
        _authorize_times(client, t, "warm")
        alone = _authorize_times(client, t, "alone")
        senders = _slow_senders(port, "".join(f"{k}: {v}\r\n" for k, v in auth.items()))
        try:
            during = _authorize_times(client, t, "during")
            # The slow clients are still there, waiting: nothing answered or dropped them.
            assert all(s.fileno() != -1 for s in senders)
        finally:
            for s in senders:
                s.close()
    # Generous on purpose (a shared, busy machine): the same order of magnitude.
    assert statistics.median(during) <= 20 * statistics.median(alone) + 0.25
