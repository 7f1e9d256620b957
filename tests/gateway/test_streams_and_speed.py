"""What the client actually got: a disconnect is billed as delivered, a slow stream loses the
fast-tier premium, and N gateway processes share one org's allocation."""

import os
import socket
import subprocess
import sys
import time
from datetime import UTC, date, datetime
from pathlib import Path

import httpx
import openai
import pytest

from billing.models import PriceVersion
from billing.selectors import month_rated_lines
from gateway.server import PROTOCOL
from metering.models import UsageEvent
from tests.gateway.conftest import STACK_LIMITS, stored_event, wait_for
from tests.quotas.conftest import threads_race

pytestmark = pytest.mark.django_db(transaction=True)
HELLO = [{"role": "user", "content": "hello"}]
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("chunks", [1, 4])
@pytest.mark.parametrize("server", [PROTOCOL, "httptools"])
def test_disconnect_after_n_chunks_is_cancelled_with_their_tokens(stack_factory, chunks,
                                                                  server):
    """Under the gateway's own protocol the server calls back when the client leaves; under
    uvicorn's a task waits for http.disconnect: either way the stream stops."""
    stack = stack_factory(limits=STACK_LIMITS, http=server)
    raw = stack.client(max_retries=0).chat.completions.with_raw_response.create(
        model=stack.model, messages=HELLO, max_tokens=100, stream=True,
        extra_body={"sim": {"rate": 5}})  # 200 ms between tokens: no chunk in flight
    request_id = raw.headers["x-request-id"]
    stream, got = raw.parse(), 0
    for chunk in stream:
        got += bool(chunk.choices and chunk.choices[0].delta.content)
        if got == chunks:
            break
    stream.close()
    closed_at = time.time()
    upstream = stack.sim_entry(request_id, until=lambda e: e["finished"] is not None)
    assert upstream["outcome"] == "client_closed"
    # The bound: the upstream request is cancelled within 1 s of the client leaving.
    assert upstream["finished"] - closed_at < 1.0
    event = stored_event(request_id)
    assert (event.status, event.output_tokens) == ("cancelled", chunks)


def _this_month() -> date:
    return date.today().replace(day=1)


def _speed_credit(org) -> int:
    lines = month_rated_lines(org=org, month=_this_month())
    return sum(line.quantity_tokens for line in lines if line.kind == "speed_credit")


def test_slow_upstream_earns_the_speed_credit_and_fast_does_not(stack):
    PriceVersion.objects.create(
        pool=stack.tenant.pool, effective_from=datetime(2026, 1, 1, tzinfo=UTC),
        input_micros_per_mtok=5_000_000, output_micros_per_mtok=30_000_000,
        premium_input_micros_per_mtok=2_000_000, premium_output_micros_per_mtok=10_000_000)
    client = stack.client(max_retries=0)

    def stream(**sim) -> str:
        raw = client.chat.completions.with_raw_response.create(
            model=stack.model, messages=HELLO, max_tokens=300, stream=True,
            extra_body={"sim": sim})
        list(raw.parse())
        return raw.headers["x-request-id"]

    fast = [stream(), stream()]
    assert all(stored_event(r).premium_eligible for r in fast)
    assert _speed_credit(stack.tenant.org) == 0
    slow = [stream(fault="slow", tokens=30), stream(fault="slow", tokens=30)]
    events = [stored_event(r) for r in slow]
    assert not any(e.premium_eligible for e in events)
    assert all(e.output_tps < stack.tenant.pool.speed_floor_output_tps for e in events)
    assert _speed_credit(stack.tenant.org) == sum(e.input_tokens + e.output_tokens
                                                  for e in events)


def _gateway_process(stack, tmp_path, n: int) -> tuple[subprocess.Popen, str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "SLUICE_URL": stack.sluice_url,
           "SLUICE_GATEWAY_TOKEN": stack.gateway_token,
           "GATEWAY_UPSTREAM_URL": stack.sim.url + "/v1",
           "GATEWAY_UPSTREAM_API_KEY": "sim-upstream-secret",
           "GATEWAY_SPOOL_PATH": str(tmp_path / f"usage-{n}.jsonl"),
           "GATEWAY_USAGE_FLUSH_INTERVAL": "0.05"}
    process = subprocess.Popen([sys.executable, "-m", "gateway", "--port", str(port)],  # noqa: S603
                               cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                               stderr=open(tmp_path / f"gateway-{n}.log", "w"))  # noqa: SIM115
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(url + "/healthz").status_code == 200
        except httpx.TransportError:
            return False

    assert wait_for(up, timeout=60), (tmp_path / f"gateway-{n}.log").read_text()
    return process, url


def test_two_gateway_processes_admit_no_more_than_the_allocation(stack_factory, tmp_path):
    stack = stack_factory(limits={"guaranteed_tps": 5_000, "burst_tps": 5_000,
                                  "daily_tokens": 10**7, "max_concurrency": 3})
    processes = [_gateway_process(stack, tmp_path, n) for n in (0, 1)]
    outcomes: list[str] = []
    try:
        def call(i: int) -> None:
            client = openai.OpenAI(base_url=processes[i % 2][1] + "/v1",
                                   api_key=stack.tenant.plaintext, max_retries=0)
            try:  # each admitted stream holds its slot for about two seconds
                list(client.chat.completions.create(
                    model=stack.model, messages=HELLO, max_tokens=40, stream=True,
                    extra_body={"sim": {"rate": 20}}))
                outcomes.append("ok")
            except openai.RateLimitError as refused:
                outcomes.append(refused.code)

        threads_race(12, call)
    finally:
        for process, _ in processes:
            process.terminate()
            process.wait(timeout=10)
    admitted = outcomes.count("ok")
    assert admitted >= 1
    assert outcomes.count("concurrency_exceeded") == 12 - admitted
    served = stack.sim_log()
    assert len(served) == admitted
    # Never more than the allocation's 3 at once (a slot frees when a stream ends, so a late
    # thread may still be admitted after one ends).
    for entry in served:
        overlapping = [e for e in served if e["started"] <= entry["started"] < e["finished"]]
        assert len(overlapping) <= 3
    assert wait_for(lambda: UsageEvent.objects.filter(org=stack.tenant.org).count()
                    == admitted)


def test_metrics_use_the_genai_names(stack):
    list(stack.client().chat.completions.create(model=stack.model, messages=HELLO,
                                                max_tokens=10, stream=True))
    text = httpx.get(stack.gateway.url + "/metrics").text
    for name in ("gen_ai_client_token_usage_bucket", "gen_ai_server_time_to_first_token_seconds",
                 "gen_ai_server_time_per_output_token_seconds",
                 "gen_ai_client_operation_duration_seconds"):
        assert name in text
    assert 'gen_ai_token_type="output"' in text
    assert ('gen_ai_gateway_requests_total{gen_ai_operation_name="chat",gen_ai_provider_name='
            f'"sluice",gen_ai_request_model="{stack.model}",outcome="completed"}} 1.0') in text
