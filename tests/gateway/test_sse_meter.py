"""The relay's byte scan (gateway/sse.py): what it counts, keeps and rewrites, on the SSE bytes
OpenAI-compatible servers send, without decoding the chunks it passes on."""

import orjson

from gateway.sse import StreamMeter


def event(payload: dict, *, kind: str | None = None, space: bool = True) -> bytes:
    head = b"event: " + kind.encode() + b"\n" if kind else b""
    data = orjson.dumps(payload)
    if space:  # some servers write `"key": value`
        data = data.replace(b'":', b'": ')
    return head + b"data: " + data + b"\n\n"


def chunk(delta: dict, **extra) -> dict:
    return {"id": "c1", "object": "chat.completion.chunk", "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": None}], **extra}


USAGE = {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}


def chat_meter(**kwargs) -> StreamMeter:
    return StreamMeter(operation="chat", **{"service_tier": None, "keep_usage": False,
                                            **kwargs})


def test_content_refusal_and_tool_call_deltas_count_empty_ones_do_not():
    meter = chat_meter()
    block = b"".join([
        event(chunk({"role": "assistant", "content": ""})),
        event(chunk({"content": "Hel"}), space=False),
        event(chunk({"content": "\"quoted\" \"content\": \"x\""})),  # keys inside text: text
        event(chunk({"refusal": "No."})),
        event(chunk({"tool_calls": [{"index": 0, "id": "t", "type": "function",
                                     "function": {"name": "f", "arguments": ""}}]})),
        event(chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{\"a\":"}}]})),
        event(chunk({"content": None, "tool_calls": []})),
        event(chunk({}, usage=None)),
    ])
    assert meter.feed(block) == block  # passed on as it came
    assert (meter.deltas, meter.usage, meter.done) == (5, None, False)


def test_the_usage_chunk_is_recorded_and_held_back_unless_asked_for():
    tail = event(chunk({}, usage=None)) + event({**chunk({}), "choices": [], "usage": USAGE}) \
        + b"data: [DONE]\n\n"
    for keep in (False, True):
        meter = chat_meter(keep_usage=keep)
        out = meter.feed(tail + event(chunk({"content": "after the end"})))
        assert meter.usage == USAGE and meter.done
        assert (b'"completion_tokens"' in out) is keep
        assert out.endswith(b"data: [DONE]\n\n") and meter.deltas == 0


def test_the_served_tier_replaces_or_joins_each_chunks_own():
    meter = chat_meter(service_tier="priority")
    block = event(chunk({"content": "a"})) + event(chunk({"content": "b"},
                                                         service_tier="default"))
    out = meter.feed(block)
    chunks = [orjson.loads(line[6:]) for line in out.split(b"\n") if line.startswith(b"data:")]
    assert [c["service_tier"] for c in chunks] == ["priority", "priority"]
    assert [c["choices"][0]["delta"]["content"] for c in chunks] == ["a", "b"]
    assert meter.feed(b"data: [DONE]\n\n") == b"data: [DONE]\n\n"


def test_responses_events_count_output_deltas_and_take_the_usage_from_the_response():
    meter = StreamMeter(operation="responses", service_tier="priority", keep_usage=True)
    response = {"id": "r", "object": "response", "status": "completed", "usage": USAGE}
    block = b"".join([
        event({"type": "response.created", "response": {**response, "usage": None}},
              kind="response.created"),
        event({"type": "response.output_text.delta", "delta": "Hi"},
              kind="response.output_text.delta"),
        event({"type": "response.function_call_arguments.delta", "delta": "{"},
              kind="response.function_call_arguments.delta"),
        event({"type": "response.output_text.done", "text": "Hi"},
              kind="response.output_text.done"),
        event({"type": "response.completed", "response": response},
              kind="response.completed"),
    ])
    out = meter.feed(block)
    assert (meter.deltas, meter.usage) == (2, USAGE)
    completed = out.split(b"\n\n")[-2]
    assert completed.startswith(b"event: response.completed\ndata: ")
    assert orjson.loads(completed.split(b"data: ", 1)[1])["response"]["service_tier"] == \
        "priority"


def test_compact_chunks_take_the_fast_path_with_the_same_result():
    text = 'data: {"no": "event"} said the model\n'  # "data: {" inside a string stays text
    compact = b"".join(event(c, space=False) for c in (
        chunk({"role": "assistant", "content": ""}), chunk({"content": text}),
        chunk({"reasoning_content": "hm"}), chunk({"refusal": ""}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]})))
    meter = chat_meter(service_tier="priority")
    out = meter.feed(compact)
    assert meter.deltas == 3
    chunks = [orjson.loads(line[6:]) for line in out.split(b"\n") if line.startswith(b"data:")]
    assert [c["service_tier"] for c in chunks] == ["priority"] * 5
    assert chunks[1]["choices"][0]["delta"]["content"] == text
