"""Admission through the reference gateway, as the official SDK sees it: refusals in OpenAI's
error shape with the hook's headers, retried only where retrying can help."""

import httpx
import openai
import pytest
from sluice_client import SluiceClient

from orgs.services import org_suspend
from tests.gateway.conftest import stored_event

pytestmark = pytest.mark.django_db(transaction=True)
HELLO = [{"role": "user", "content": "hello"}]


def counting_client(stack, statuses: list, **kwargs) -> openai.OpenAI:
    """An SDK client that notes the status of every HTTP attempt it makes."""
    def note(response: httpx.Response) -> None:
        statuses.append((response.status_code, dict(response.headers)))

    return stack.client(http_client=openai.DefaultHttpxClient(event_hooks={"response": [note]}),
                        **kwargs)


def drain(stack, tmp_path, *, input_tokens: int) -> None:
    """Hold tokens with a reservation nobody settles (another gateway's request in flight)."""
    sluice = SluiceClient(stack.sluice_url, token=stack.gateway_token,
                          spool_path=str(tmp_path / "drain.jsonl"), flush_interval=3600)
    grant = sluice.authorize(request_id="drain-1", api_key=stack.tenant.plaintext,
                             model=stack.model, input_tokens=input_tokens, max_output_tokens=1)
    sluice.close()
    assert grant.allowed, grant


def test_tps_refusal_is_retried_after_retry_after_ms_and_succeeds(stack_factory, tmp_path):
    stack = stack_factory(limits={"guaranteed_tps": 100, "burst_tps": 100,
                                  "daily_tokens": 10**7, "max_concurrency": 20})
    drain(stack, tmp_path, input_tokens=999)  # the burst bucket is 100 tok/s x 10 s
    statuses: list = []
    # ~310 tokens: ~3 s of refill at 100 tok/s, far more than the time since the drain.
    completion = counting_client(stack, statuses).chat.completions.create(
        model=stack.model, messages=HELLO, max_tokens=300, extra_body={"sim": {"tokens": 5}})
    assert completion.choices[0].message.content
    first_status, first_headers = statuses[0]
    assert first_status == 429
    assert int(first_headers["retry-after-ms"]) > 0 and first_headers["retry-after"]
    assert first_headers["x-should-retry"] == "true"
    assert first_headers["x-ratelimit-limit-tokens"] == "1000"
    assert first_headers["x-ratelimit-limit-tokens-minute"] == "6000"  # 60 x 100 tok/s
    assert statuses[-1][0] == 200
    assert all(s == 429 for s, _ in statuses[:-1])


def test_daily_quota_refusal_is_one_attempt(stack_factory, tmp_path):
    stack = stack_factory(limits={"guaranteed_tps": 1000, "burst_tps": 1000,
                                  "daily_tokens": 1_000, "max_concurrency": 20})
    drain(stack, tmp_path, input_tokens=990)
    statuses: list = []
    with pytest.raises(openai.RateLimitError) as refused:
        counting_client(stack, statuses).chat.completions.create(
            model=stack.model, messages=HELLO, max_tokens=100)
    assert len(statuses) == 1
    status, headers = statuses[0]
    assert (status, headers["x-should-retry"]) == (429, "false")
    assert headers["x-ratelimit-limit-tokens-day"] == "1000" and headers["x-request-id"]
    error = refused.value.body
    assert set(error) >= {"message", "type", "code", "param"}
    assert (error["code"], error["type"]) == ("daily_quota_exhausted", "insufficient_quota")


def test_invalid_key_is_an_authentication_error(stack):
    statuses: list = []
    with pytest.raises(openai.AuthenticationError) as refused:
        counting_client(stack, statuses, api_key="sk_nope_nope").chat.completions.create(
            model=stack.model, messages=HELLO)
    assert refused.value.code == "invalid_api_key"
    assert len(statuses) == 1


def test_suspended_org_is_permission_denied(stack):
    org_suspend(org=stack.tenant.org, actor="test", reason="abuse")
    with pytest.raises(openai.PermissionDeniedError) as refused:
        stack.client().chat.completions.create(model=stack.model, messages=HELLO)
    assert refused.value.code == "org_not_active"
    assert stack.sim_log() == []  # nothing reached the upstream


def test_models_lists_what_the_org_may_use(stack, tmp_path):
    assert [m.id for m in stack.client().models.list()] == [stack.model]
    with pytest.raises(openai.AuthenticationError):
        stack.client(api_key="sk_nope_nope").models.list()


def test_upstream_failure_is_a_502_recorded_failed(stack):
    statuses: list = []
    with pytest.raises(openai.InternalServerError) as failed:
        counting_client(stack, statuses, max_retries=0).chat.completions.create(
            model=stack.model, messages=HELLO, extra_body={"sim": {"fault": "error"}})
    assert failed.value.status_code == 502 and failed.value.code == "upstream_error"
    event = stored_event(statuses[0][1]["x-request-id"])
    assert (event.status, event.output_tokens) == ("failed", 0)


@pytest.mark.parametrize("upstream_api_key", ["", "sk-not-the-upstreams"])
@pytest.mark.parametrize("stream", [False, True])
def test_an_upstream_refusing_the_gateways_credential_is_a_502_billed_nothing(
        stack_factory, caplog, upstream_api_key, stream):
    # One request at a time: the second is admitted only if the first one's slot was freed.
    stack = stack_factory(limits={"guaranteed_tps": 5_000, "burst_tps": 5_000,
                                  "daily_tokens": 10**7, "max_concurrency": 1},
                          upstream_api_key=upstream_api_key)
    statuses: list = []
    client = counting_client(stack, statuses, max_retries=3)
    for _ in range(2):
        with pytest.raises(openai.InternalServerError) as failed:
            client.chat.completions.create(model=stack.model, messages=HELLO, stream=stream)
        assert (failed.value.status_code, failed.value.code) == (502, "upstream_auth_failed")
    # The caller's key is fine and retrying cannot help: the SDK is told not to.
    assert [s for s, _ in statuses] == [502, 502]
    assert statuses[0][1]["x-should-retry"] == "false"
    for _, headers in statuses:
        event = stored_event(headers["x-request-id"])
        assert (event.status, event.input_tokens, event.output_tokens) == ("failed", 0, 0)
    told = [r for r in caplog.records if r.name == "gateway" and "GATEWAY_UPSTREAM_API_KEY"
            in r.getMessage()]
    assert len(told) == 1 and told[0].levelname == "ERROR"  # once a minute, not per request
    assert stack.sim.url in told[0].getMessage()


def test_upstream_stall_is_a_504_recorded_failed(stack):
    statuses: list = []
    with pytest.raises(openai.APIStatusError) as failed:
        counting_client(stack, statuses, max_retries=0).chat.completions.create(
            model=stack.model, messages=HELLO, extra_body={"sim": {"fault": "stall"}})
    assert failed.value.status_code == 504 and failed.value.code == "upstream_timeout"
    assert stored_event(statuses[0][1]["x-request-id"]).status == "failed"


def test_mid_stream_upstream_failure_raises_api_error(stack):
    statuses: list = []
    stream = counting_client(stack, statuses, max_retries=0).chat.completions.create(
        model=stack.model, messages=HELLO, max_tokens=50, stream=True,
        extra_body={"sim": {"fault": "disconnect", "after_tokens": 7}})
    received = []
    with pytest.raises(openai.APIError) as broken:
        for chunk in stream:
            received.append(chunk.choices[0].delta.content or "")
    assert "broke the stream" in broken.value.message
    assert len([t for t in received if t]) == 7
    event = stored_event(statuses[0][1]["x-request-id"])
    assert (event.status, event.output_tokens) == ("failed", 7)
