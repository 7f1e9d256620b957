"""What the gateway refuses before it spends anything, and what it does when a client leaves:
the key from the headers before the body, the body bounded by its declared length and while it
is read, every answer under /v1/ in OpenAI's error shape, metrics labelled only with served
models, a non-streaming client that disconnects cancels its upstream request."""

import json
import socket
import time

import httpx
import openai
import pytest

from gateway.app import KEY_CHECK_BODY_BYTES
from tests.gateway.conftest import stored_event, wait_for

pytestmark = pytest.mark.django_db(transaction=True)
HELLO = [{"role": "user", "content": "hello"}]
LIMIT = 64 * 1024


def raw_request(stack, head: str, body: bytes = b"", *, read_timeout: float = 10.0) -> bytes:
    """Send `head` (and whatever of the body is given) and read the answer until the gateway
    closes the connection or the answer is complete."""
    with socket.create_connection((stack.gateway.host, stack.gateway.port)) as sock:
        sock.settimeout(read_timeout)
        sock.sendall(head.encode() + body)
        answer = b""
        while True:
            try:
                data = sock.recv(65536)
            except (TimeoutError, ConnectionResetError):
                break
            if not data:
                break
            answer += data
            head_end = answer.find(b"\r\n\r\n")
            if head_end >= 0 and b"content-length:" in answer[:head_end].lower():
                length = int(answer[:head_end].lower().split(b"content-length:")[1]
                             .split(b"\r\n")[0])
                if len(answer) >= head_end + 4 + length:
                    break
        return answer


def status_and_error(answer: bytes) -> tuple[int, dict]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(body)["error"]


def post_head(stack, *, key: str, length: int | None, path: str = "/v1/chat/completions") -> str:
    size = f"Content-Length: {length}\r\n" if length is not None else \
        "Transfer-Encoding: chunked\r\n"
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: application/json\r\n{size}\r\n")


@pytest.fixture
def small_stack(stack_factory):
    return stack_factory(limits={"guaranteed_tps": 5_000, "burst_tps": 5_000,
                                 "daily_tokens": 10**7, "max_concurrency": 20},
                         max_body_bytes=LIMIT)


def test_a_declared_length_over_the_limit_is_refused_before_any_body(small_stack):
    # The body never comes: the answer must not wait for it.
    answer = raw_request(small_stack, post_head(small_stack, key=small_stack.tenant.plaintext,
                                                length=LIMIT + 1))
    status, error = status_and_error(answer)
    assert (status, error["code"], error["type"]) == (413, "request_too_large",
                                                      "invalid_request_error")
    assert b"connection: close" in answer.lower()
    assert small_stack.sim_log() == []


def test_a_chunked_body_is_cut_at_the_limit_and_the_limit_itself_passes(small_stack):
    def chunked(size: int) -> bytes:
        text = "x" * (size - len(json.dumps({"model": small_stack.model, "messages": [
            {"role": "user", "content": ""}], "max_tokens": 1})))
        body = json.dumps({"model": small_stack.model, "messages": [
            {"role": "user", "content": text}], "max_tokens": 1}).encode()
        assert len(body) == size
        return b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)

    # A key this process has seen admitted: its large bodies are read without asking Sluice.
    small_stack.client().chat.completions.create(model=small_stack.model, messages=HELLO,
                                                 max_tokens=1)
    over = raw_request(small_stack, post_head(small_stack, key=small_stack.tenant.plaintext,
                                              length=None), chunked(LIMIT + 1))
    assert status_and_error(over)[0] == 413
    at = raw_request(small_stack, post_head(small_stack, key=small_stack.tenant.plaintext,
                                            length=None), chunked(LIMIT))
    assert at.startswith(b"HTTP/1.1 200")


def test_an_invalid_key_is_refused_before_a_large_body_is_read(stack):
    size = KEY_CHECK_BODY_BYTES + 1
    started = time.monotonic()
    # Only the head is sent: a gateway that read the body first would wait for it forever.
    answer = raw_request(stack, post_head(stack, key="sk_nope_nope", length=size),
                         read_timeout=10)
    status, error = status_and_error(answer)
    assert (status, error["code"]) == (401, "invalid_api_key")
    assert time.monotonic() - started < 10
    # The refusal is remembered: the next request with that key is refused from the headers.
    again = raw_request(stack, post_head(stack, key="sk_nope_nope", length=size))
    assert status_and_error(again)[0] == 401
    # A good key's large body is read, once Sluice has said the key is good (an image: large,
    # and few tokens).
    body = json.dumps({"model": stack.model, "max_tokens": 1, "messages": [
        {"role": "user", "content": [{"type": "image_url", "image_url": {
            "url": "data:image/png;base64," + "A" * size, "detail": "low"}}]}]}).encode()
    good = raw_request(stack, post_head(stack, key=stack.tenant.plaintext, length=len(body)),
                       body)
    assert good.startswith(b"HTTP/1.1 200")


def test_a_missing_key_is_refused_without_reading_the_body(stack):
    answer = raw_request(stack, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                                "Content-Length: 1000000\r\n\r\n")
    status, error = status_and_error(answer)
    assert (status, error["code"]) == (401, "invalid_api_key")


def test_unknown_routes_and_methods_answer_in_openais_error_shape(stack):
    with pytest.raises(openai.NotFoundError) as missing:
        stack.client(max_retries=0).embeddings.create(model=stack.model, input="hi")
    assert missing.value.code == "unknown_url"
    assert set(missing.value.body) == {"message", "type", "code", "param"}
    wrong = httpx.get(stack.gateway.url + "/v1/chat/completions")
    assert wrong.status_code == 405 and wrong.headers["allow"] == "POST"
    assert wrong.json()["error"]["code"] == "method_not_allowed"
    assert httpx.get(stack.gateway.url + "/v2/anything").json()["error"]["type"] == \
        "invalid_request_error"


def test_metrics_label_only_models_a_pool_serves(stack):
    with pytest.raises(openai.NotFoundError):
        stack.client(max_retries=0).chat.completions.create(
            model="made-up-model-7f3a9c", messages=HELLO)
    stack.client().chat.completions.create(model=stack.model, messages=HELLO, max_tokens=2)
    text = httpx.get(stack.gateway.url + "/metrics").text
    assert "made-up-model-7f3a9c" not in text
    assert 'gen_ai_request_model="other",outcome="refused"' in text
    assert f'gen_ai_request_model="{stack.model}",outcome="completed"' in text
    assert "gen_ai_gateway_admission_duration_seconds_count 2.0" in text  # both asked Sluice


def test_a_non_streaming_client_that_leaves_cancels_the_upstream(stack):
    statuses: list = []
    client = stack.client(max_retries=0, timeout=1.0, http_client=openai.DefaultHttpxClient(
        event_hooks={"request": [lambda r: statuses.append(r)]}))
    started = time.time()
    with pytest.raises(openai.APITimeoutError):  # the SDK gives up and closes the connection
        client.chat.completions.create(model=stack.model, messages=HELLO, max_tokens=50,
                                       extra_body={"sim": {"rate": 5}})  # ~10 s to answer
    entry = wait_for(lambda: next((e for e in stack.sim_log() if e["finished"]), None))
    assert entry["outcome"] == "client_closed"
    assert entry["finished"] - started < 5
    event = stored_event(entry["request_id"])
    assert (event.status, event.output_tokens) == ("cancelled", 0)


def test_models_are_asked_of_sluice_once_per_key_for_a_few_seconds(stack):
    gateway, calls = stack.app, []
    authorize = gateway.sluice.authorize

    async def counted(**kwargs):
        calls.append(kwargs["model"])
        return await authorize(**kwargs)

    gateway.sluice.authorize = counted
    assert [m.id for m in stack.client().models.list()] == [stack.model]
    assert [m.id for m in stack.client().models.list()] == [stack.model]
    assert calls == [stack.model]


def test_a_stream_cut_before_its_usage_bills_the_estimate_with_its_tool_payload(stack):
    arguments = json.dumps({"document": "z" * 8000})
    messages = [{"role": "user", "content": "summarize"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function",
                     "function": {"name": "fetch", "arguments": arguments}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "w" * 4000}]
    raw = stack.client(max_retries=0).chat.completions.with_raw_response.create(
        model=stack.model, messages=messages, max_tokens=100, stream=True,
        extra_body={"sim": {"rate": 5}})
    stream = raw.parse()
    for c in stream:
        if c.choices and c.choices[0].delta.content:
            break
    stream.close()
    event = stored_event(raw.headers["x-request-id"])
    # Billed what the gateway delivered before it saw the close: the token the client read, and
    # any the upstream sent (5/s) while a busy machine delayed the close.
    assert event.status == "cancelled" and 1 <= event.output_tokens < 100
    # No usage came: the input billed is the estimate, which counts the tool payloads.
    assert event.input_tokens >= (len(arguments) + 4000) // 4


def test_the_upstream_connection_is_kept_after_done(stack):
    client = stack.client()
    for _ in range(2):
        list(client.chat.completions.create(model=stack.model, messages=HELLO, max_tokens=5,
                                            stream=True))
    pools = stack.app._upstream_pools
    assert wait_for(lambda: sum(len(p._idle) for p in pools.values()) == 1)


def test_a_stream_that_stalls_mid_way_ends_with_an_error_after_the_read_timeout(stack):
    raw = stack.client(max_retries=0).chat.completions.with_raw_response.create(
        model=stack.model, messages=HELLO, max_tokens=50, stream=True,
        extra_body={"sim": {"fault": "stall", "after_tokens": 3}})
    received = []
    with pytest.raises(openai.APIError) as broken:  # the stack's upstream timeout: 2 s
        for c in raw.parse():
            received.append(c.choices[0].delta.content if c.choices else None)
    assert "stopped sending" in broken.value.message
    assert len([t for t in received if t]) == 3
    event = stored_event(raw.headers["x-request-id"])
    assert (event.status, event.output_tokens) == ("failed", 3)
