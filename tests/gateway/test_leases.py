"""Leases through the reference gateway (issue #31): a slot is free the moment a stream ends,
and a gateway process killed mid-stream costs seconds of capacity and almost no unbilled
tokens. Real servers: Sluice (live_server, PostgreSQL, Redis), the simulated upstream, the
gateway in a thread or, to be killed, in a process of its own."""

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import orjson
import pytest

from metering.models import UsageEvent
from quotas.publish import limiter_sync_pool
from tests.aio import run_async
from tests.factories import PoolFactory
from tests.gateway.conftest import wait_for
from tests.quotas.conftest import threads_race

pytestmark = pytest.mark.django_db(transaction=True)
HELLO = [{"role": "user", "content": "hello"}]
ROOT = Path(__file__).resolve().parents[2]
LEASE_TTL = 6  # seconds: the shortest a pool allows


def test_exactly_max_concurrency_back_to_back_is_never_refused(stack_factory):
    stack = stack_factory(limits={"guaranteed_tps": 5_000, "burst_tps": 5_000,
                                  "daily_tokens": 10**8, "max_concurrency": 4})
    outcomes: list[str] = []

    def worker(i: int) -> None:
        client = stack.client(max_retries=0)
        for _ in range(20):
            try:  # the next request starts the moment the previous stream is read to its end
                list(client.chat.completions.create(
                    model=stack.model, messages=HELLO, max_tokens=5, stream=True))
                outcomes.append("ok")
            except openai.RateLimitError as refused:
                outcomes.append(refused.code)

    threads_race(4, worker)
    assert outcomes == ["ok"] * 80, [o for o in outcomes if o != "ok"]


def test_one_over_max_concurrency_is_always_refused(stack_factory):
    stack = stack_factory(limits={"guaranteed_tps": 5_000, "burst_tps": 5_000,
                                  "daily_tokens": 10**8, "max_concurrency": 4})
    client = stack.client(max_retries=0)

    def stream(tokens: int, rate: float):
        opened = client.chat.completions.create(
            model=stack.model, messages=HELLO, max_tokens=tokens, stream=True,
            extra_body={"sim": {"rate": rate}})
        iterator = iter(opened)
        next(iterator)  # admitted and streaming
        return opened, iterator

    def refused() -> str:
        with pytest.raises(openai.RateLimitError) as error:
            client.chat.completions.create(model=stack.model, messages=HELLO, max_tokens=5,
                                           stream=True)
        return error.value.code

    held = [stream(100, 5) for _ in range(3)]     # ~20 s each
    ending = stream(40, 10)                       # ~4 s: outlives the refusals below
    assert [refused() for _ in range(3)] == ["concurrency_exceeded"] * 3
    list(ending[1])  # read to its end: its slot is free now
    held.append(stream(100, 5))
    assert refused() == "concurrency_exceeded"
    for opened, _ in held:
        opened.close()


# --- a gateway process killed mid-stream ---------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _gateway_process(stack, tmp_path, name: str, **env) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    env = {**os.environ, "SLUICE_URL": stack.sluice_url,
           "SLUICE_GATEWAY_TOKEN": stack.gateway_token,
           "GATEWAY_UPSTREAM_URL": stack.sim.url + "/v1",
           "GATEWAY_UPSTREAM_API_KEY": "sim-upstream-secret",
           "GATEWAY_SPOOL_PATH": str(tmp_path / "spool" / "usage.jsonl"),
           "GATEWAY_USAGE_FLUSH_INTERVAL": "0.05", **env}
    log = tmp_path / f"gateway-{name}.log"
    process = subprocess.Popen([sys.executable, "-m", "gateway", "--port", str(port)],  # noqa: S603
                               cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                               stderr=open(log, "w"))  # noqa: SIM115
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(url + "/healthz").status_code == 200
        except httpx.TransportError:
            return False

    assert wait_for(up, timeout=60), log.read_text()
    return process, url


async def _streams(url: str, api_key: str, model: str, n: int, *, tokens: int,
                   kill_after: float | None = None, process=None) -> list[tuple[str, int]]:
    """n concurrent streams: each one's request id and the output tokens its client received
    (one per content chunk, as the simulated upstream sends them)."""
    received: dict[int, list] = {i: [None, 0] for i in range(n)}
    started = asyncio.Event()
    admitted = 0

    async def one(i: int, http: httpx.AsyncClient) -> None:
        nonlocal admitted
        body = {"model": model, "messages": HELLO, "max_tokens": tokens, "stream": True}
        try:
            async with http.stream("POST", url + "/v1/chat/completions", json=body,
                                   headers={"authorization": f"Bearer {api_key}"}) as answer:
                assert answer.status_code == 200, await answer.aread()
                received[i][0] = answer.headers["x-request-id"]
                admitted += 1
                if admitted == n:
                    started.set()
                async for line in answer.aiter_lines():
                    if line.startswith("data: {"):
                        chunk = orjson.loads(line[6:])
                        if chunk.get("choices") and chunk["choices"][0]["delta"].get("content"):
                            received[i][1] += 1
        except httpx.TransportError:
            pass  # the gateway died under it

    async def killer() -> None:  # kill_after seconds after the requests were sent
        await started.wait()
        await asyncio.sleep(max(0.0, sent_at + kill_after - time.monotonic()))
        process.send_signal(signal.SIGKILL)

    async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=n + 5)) as http:
        jobs = [one(i, http) for i in range(n)]
        if kill_after is not None:
            jobs.append(killer())
        sent_at = time.monotonic()
        await asyncio.gather(*jobs)
    return [tuple(v) for v in received.values()]


def _admits_concurrent_streams(url: str, api_key: str, model: str, n: int) -> bool:
    """n streams through the gateway at once, each admitted (then closed)."""
    async def run() -> bool:
        async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=n)) as http:
            body = {"model": model, "messages": HELLO, "max_tokens": 10, "stream": True,
                    "sim": {"rate": 5}}  # each would last 2 s: all n overlap
            headers = {"authorization": f"Bearer {api_key}"}
            requests = [http.send(http.build_request("POST", url + "/v1/chat/completions",
                                                     json=body, headers=headers), stream=True)
                        for _ in range(n)]
            answers = await asyncio.gather(*requests)
            for answer in answers:
                await answer.aclose()
            return all(a.status_code == 200 for a in answers)

    return run_async(run())


def test_a_killed_gateway_costs_seconds_of_capacity_and_almost_no_unbilled_tokens(
        stack_factory, tmp_path):
    pool = PoolFactory(capacity_tps=200_000, lease_ttl_seconds=LEASE_TTL)
    stack = stack_factory(limits={"pool": pool, "guaranteed_tps": 100_000,
                                  "burst_tps": 100_000, "daily_tokens": 10**9,
                                  "max_concurrency": 20})
    limiter_sync_pool(pool_id=pool.pk)
    key, model = stack.tenant.plaintext, stack.model
    # The first process keeps usage in memory for a minute: what it finished before it died
    # is found in its progress file, not lost.
    first, first_url = _gateway_process(stack, tmp_path, "first",
                                        GATEWAY_USAGE_FLUSH_INTERVAL="60")
    replacement = None
    try:
        finished = run_async(_streams(first_url, key, model, 3, tokens=20))
        killed = run_async(_streams(first_url, key, model, 20, tokens=3_000, kill_after=1.5,
                                    process=first))
        killed_at = time.monotonic()
        first.wait(timeout=10)
        received = sum(got for _, got in killed)
        assert all(rid for rid, _ in killed) and received > 20 * 500, killed
        replacement, url = _gateway_process(stack, tmp_path, "replacement")
        # The org gets its 20 concurrent streams back within the lease's TTL (+5 s).
        deadline = killed_at + LEASE_TTL + 5
        while not _admits_concurrent_streams(url, key, model, 20):
            assert time.monotonic() < deadline, "the dead process's slots were not freed"
            time.sleep(0.2)

        ids = [rid for rid, _ in killed]
        events = wait_for(lambda: (lambda found: found if len(found) == 20 else None)(
            {e.request_id: e for e in UsageEvent.objects.filter(request_id__in=ids)}))
        assert events, "the killed streams were not reported"
        billed = sum(e.output_tokens for e in events.values())
        report = {rid: (got, events[rid].status, events[rid].output_tokens)
                  for rid, got in killed}
        assert all(status == "interrupted" for _, status, _ in report.values()), report
        # What the gateway had handed to its socket when it died: what the clients received,
        # give or take what the kernel had not yet passed on.
        assert billed <= received * 1.01, report
        assert billed >= 0.95 * received, (billed, received, report)
        done = [rid for rid, _ in finished]
        assert wait_for(lambda: UsageEvent.objects.filter(
            request_id__in=done, status="completed").count() == 3)
    finally:
        for process in (first, replacement):
            if process is not None and process.poll() is None:
                process.terminate()
                process.wait(timeout=10)
    # Once the spooled usage has arrived (and a third process found nothing left to send),
    # every request is billed exactly once.
    third, _ = _gateway_process(stack, tmp_path, "third")
    third.terminate()
    third.wait(timeout=10)
    all_ids = [rid for rid, _ in killed] + done
    assert UsageEvent.objects.filter(request_id__in=all_ids).count() == 23
