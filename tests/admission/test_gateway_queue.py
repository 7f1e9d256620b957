"""The queue through the reference gateway, as the official SDK sees it: the `queue_threshold`
header makes a request wait instead of being refused, and a full queue is a 429 the SDK
retries as it retries any rate limit. Sluice is the production server (config/serve.py):
waiting needs authorize on its event loop."""

import contextlib
import threading

import openai
import pytest
from sluice_client import SluiceClient, SluiceUnavailable

from tests.admission.test_hook_queue import drain, slot_hold, waiting
from tests.factories import PoolFactory
from tests.gateway.conftest import sluice_stack, stored_event, wait_for
from tests.gateway.test_admission import counting_client
from tests.server import sluice_server

pytestmark = pytest.mark.django_db(transaction=True)
HELLO = [{"role": "user", "content": "hello"}]


@pytest.fixture
def stack_on_server(redis_client, tmp_path):
    made = []

    def make(*, env=None, **limits):
        server = sluice_server(env=env)
        base, _ = server.__enter__()
        pool = PoolFactory(queue_max_wait_ms=20_000)
        stack = sluice_stack(sluice_url=base, tmp_path=tmp_path,
                             limits={"pool": pool, **limits})
        made.append((server, stack))
        return stack

    yield make
    for server, stack in made:
        stack.gateway.stop()
        stack.sim.stop()
        server.__exit__(None, None, None)


def test_a_request_with_queue_threshold_waits_instead_of_being_refused(stack_on_server):
    stack = stack_on_server(guaranteed_tps=100, burst_tps=100, daily_tokens=10**7,
                            max_concurrency=20)
    drain(stack.tenant, 1000)
    statuses: list = []
    completion = counting_client(stack, statuses, max_retries=0).chat.completions.create(
        model=stack.model, messages=HELLO, max_tokens=150, extra_body={"sim": {"tokens": 5}},
        extra_headers={"queue_threshold": "20000"})
    assert completion.choices[0].message.content
    assert [s for s, _ in statuses] == [200]
    headers = statuses[0][1]
    queued = int(headers["x-sluice-queued-ms"])
    # The usage event carries the wait, and the Usage API and the portal show it.
    assert stored_event(headers["x-request-id"]).queued_ms == queued
    from datetime import timedelta

    from django.utils import timezone

    from metering.selectors import delivered_speed
    [speed] = delivered_speed(org=stack.tenant.org, since=timezone.now() - timedelta(hours=1))
    assert speed.waited == 1 and speed.queued_p50_ms == queued


def test_an_eta_beyond_the_header_is_refused_at_once_with_it(stack_on_server):
    stack = stack_on_server(guaranteed_tps=100, burst_tps=100, daily_tokens=10**7,
                            max_concurrency=20)
    drain(stack.tenant, 1000)
    statuses: list = []
    with pytest.raises(openai.RateLimitError) as refused:
        counting_client(stack, statuses, max_retries=0).chat.completions.create(
            model=stack.model, messages=HELLO, max_tokens=150,
            extra_headers={"queue_threshold": "50"})
    headers = statuses[0][1]
    assert refused.value.code == "tps_exceeded"
    assert headers["retry-after-ms"] == headers["x-sluice-queue-eta-ms"]
    assert int(headers["x-sluice-queue-eta-ms"]) > 50


def test_a_bad_queue_threshold_header_is_a_400(stack_on_server):
    stack = stack_on_server(guaranteed_tps=100, burst_tps=100, daily_tokens=10**7,
                            max_concurrency=20)
    with pytest.raises(openai.BadRequestError) as refused:
        stack.client(max_retries=0).chat.completions.create(
            model=stack.model, messages=HELLO, max_tokens=10,
            extra_headers={"queue_threshold": "20001"})
    assert refused.value.code == "invalid_queue_threshold"


def test_the_sdk_retries_a_full_queue_and_then_raises(stack_on_server, tmp_path):
    """The org's queue holds one request (SLUICE_QUEUE_ORG_CAP=1), which waits for the org's
    one concurrency slot: the SDK's request is refused queue_full, retryable (x-should-retry),
    retried after retry-after-ms like any rate limit, and raised once its retries are spent."""
    stack = stack_on_server(env={"SLUICE_QUEUE_ORG_CAP": "1"}, guaranteed_tps=1000,
                            burst_tps=1000, daily_tokens=10**7, max_concurrency=1)
    slot_hold(stack.tenant, "held")  # holds the one slot: nobody releases it
    sluice = SluiceClient(stack.sluice_url, token=stack.gateway_token,
                          spool_path=str(tmp_path / "waiter.jsonl"), flush_interval=3600)

    def wait_in_queue():
        with contextlib.suppress(SluiceUnavailable):  # the server stops before its budget ends
            sluice.authorize(request_id="waiter-1", api_key=stack.tenant.plaintext,
                             model=stack.model, input_tokens=10, max_output_tokens=10,
                             queue_threshold_ms=20_000)

    waiter = threading.Thread(target=wait_in_queue, daemon=True)
    waiter.start()
    assert wait_for(lambda: waiting(stack.tenant.pool.pk) == 1)
    statuses: list = []
    with pytest.raises(openai.RateLimitError) as refused:
        counting_client(stack, statuses, max_retries=2).chat.completions.create(
            model=stack.model, messages=HELLO, max_tokens=10,
            extra_headers={"queue_threshold": "20000"})
    assert refused.value.code == "queue_full"
    assert [s for s, _ in statuses] == [429] * 3
    assert all(h["x-should-retry"] == "true" and int(h["retry-after-ms"]) > 0
               for _, h in statuses)
