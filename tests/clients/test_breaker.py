"""The asyncio client's breaker: once Sluice could not be reached, calls fail at once without
touching the network until a background probe gets an answer; a slow answer is never a
failure (a request waiting in an admission queue must not open it)."""

import asyncio
import json

import pytest
from sluice_client import SluiceUnavailable
from sluice_client.aio import AsyncSluiceClient

from tests.aio import run_async

ALLOWED = {"allowed": True, "reservation_id": "r1", "org": 1, "reserved_tokens": 10,
           "headers": {}}


class SluiceStandIn:
    """A real HTTP server on loopback playing Sluice: `mode` "drop" reads a request and closes
    the connection without answering (Sluice down behind a proxy, or crashing), "answer"
    answers after `delay` seconds (every authorize, batched or not, admitted). `paths` lists
    the requests it read."""

    def __init__(self):
        self.mode, self.delay, self.paths = "drop", 0.0, []

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def stop(self) -> None:
        self.server.close()

    async def _serve(self, reader, writer) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                request = await reader.readexactly(length)
                path = head.split(b" ")[1].decode()
                self.paths.append(path)
                if self.mode == "drop":
                    break
                await asyncio.sleep(self.delay)
                body = json.dumps(ALLOWED if not path.endswith("/batch") else {"results": [
                    {"status": 200, "body": ALLOWED}
                    for _ in json.loads(request)["requests"]]}).encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def authorize(client: AsyncSluiceClient, n: int = 0):
    return client.authorize(request_id=f"b{n}", api_key="sk_x", model="m", input_tokens=1)


def test_known_down_fails_at_once_until_a_probe_answers(tmp_path):
    async def run():
        sluice = SluiceStandIn()
        url = await sluice.start()
        client = AsyncSluiceClient(url, token="gw_x", spool_path=str(tmp_path / "u.jsonl"),
                                   retries=2, probe_interval=0.05, flush_interval=3600)
        await client.start()
        with pytest.raises(SluiceUnavailable):
            await authorize(client)
        authorizes = lambda: sluice.paths.count("/api/gateway/v1/authorize")  # noqa: E731
        assert authorizes() == 3  # the call and its retries
        assert client.breaker.open
        for n in range(5):  # known down: no request leaves, usage goes to the spool
            with pytest.raises(SluiceUnavailable):
                await authorize(client, n)
        client.report_usage({"request_id": "u1"})
        await client.flush()
        assert authorizes() == 3 and len(client.spool) == 1
        assert "/api/gateway/v1/usage" not in sluice.paths
        # Sluice answers again: the probe (of /healthz) notices and calls go through.
        sluice.mode = "answer"
        for _ in range(200):
            if not client.breaker.open:
                break
            await asyncio.sleep(0.02)
        assert not client.breaker.open and "/healthz" in sluice.paths
        assert (await authorize(client, 9)).allowed
        client.spool.take()
        client.spool.taken()  # the stand-in's usage answers are not Sluice's
        await client.breaker.stop()
        await sluice.stop()

    run_async(run())


def test_slow_answers_never_open_it(tmp_path):
    async def run():
        sluice = SluiceStandIn()
        sluice.mode, sluice.delay = "answer", 0.3
        url = await sluice.start()
        async with AsyncSluiceClient(url, token="gw_x", spool_path=str(tmp_path / "u.jsonl"),
                                     retries=0, timeout=2.0, flush_interval=3600) as client:
            pending = [asyncio.ensure_future(authorize(client, n)) for n in range(5)]
            await asyncio.sleep(0.15)
            assert not client.breaker.open  # in flight, waiting: not a failure
            grants = await asyncio.gather(*pending)
            assert all(g.allowed for g in grants) and not client.breaker.open
        await sluice.stop()

    run_async(run())


def test_a_call_allowed_to_wait_is_not_a_failure_when_its_answer_is_late(tmp_path):
    """The admission queue's seam: a call that declares its own read timeout (its wait budget)
    reached Sluice when it times out; a call with the client's timeout that gets no answer
    is Sluice not answering."""
    async def run():
        sluice = SluiceStandIn()
        sluice.mode, sluice.delay = "answer", 0.6
        url = await sluice.start()
        async with AsyncSluiceClient(url, token="gw_x", spool_path=str(tmp_path / "u.jsonl"),
                                     retries=2, timeout=0.2, flush_interval=3600) as client:
            with pytest.raises(SluiceUnavailable):
                await client.authorize(request_id="q1", api_key="sk_x", model="m",
                                       input_tokens=1, read_timeout=0.3)
            assert not client.breaker.open
            assert sluice.paths.count("/api/gateway/v1/authorize") == 1  # not retried
            with pytest.raises(SluiceUnavailable):
                await authorize(client)
            assert client.breaker.open  # the client's own timeout, after its retries
            await client.breaker.stop()
        await sluice.stop()

    run_async(run())
