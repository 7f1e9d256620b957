"""Metering an upstream's SSE stream from its bytes, without decoding every chunk.

The relay passes the upstream's bytes on as they came (one write per read, as the upstream
coalesced them) and needs only three things from them: how much output the client was sent,
the final usage, and where the stream ends. Each is a pattern in the bytes, found by `re` in C:

- an output delta: a chat chunk's non-empty `content`, `refusal` or `reasoning_content`
  string, or a non-empty `tool_calls` list; a Responses `response.*.delta` event that carries
  output (text, refusal, function-call arguments, reasoning). JSON escapes every `"` inside a
  string, so a key pattern can never match text inside a value;
- the usage: the one chat event with a `"usage": {...}` object, or a Responses event carrying
  the response (`response.created`, `.completed`, ...): only these few events are decoded.

The tier Sluice served the request on replaces (or is added to) each chat chunk's
`service_tier`, and the one of the response a Responses event carries, as OpenAI's streams
name it; a chat chunk gets it by a byte edit, not a decode.
"""

import re

import orjson

EVENT_END = b"\n\n"

_CHAT_RARE_KEYS = (b'"refusal":', b'"reasoning_content":')
_CHAT_RARE = re.compile(rb'"re(?:fusal|asoning_content)":')  # one pass finds either
_CHAT_TEXT = re.compile(rb'"(?:content|refusal|reasoning_content)"\s*:\s*"(?!")')
_CHAT_TOOL_CALLS = re.compile(rb'"tool_calls"\s*:\s*\[\s*\{')
_RESPONSES_DELTA = re.compile(
    rb'"type"\s*:\s*"response\.(?:output_text|refusal|function_call_arguments|reasoning_text'
    rb'|reasoning_summary_text|output_audio_transcript)\.delta"')
_USAGE = re.compile(rb'"usage"\s*:\s*\{')
_RESPONSE_OBJECT = re.compile(rb'"response"\s*:\s*\{')
_DONE = re.compile(rb"(?m)^data: ?\[DONE\][ \t]*$")
_DATA_OBJECT = re.compile(rb"(?m)^data: ?\{")
_TIER = re.compile(rb'"service_tier"\s*:\s*(?:"[^"\\]*"|null)')


class StreamMeter:
    """Feed it complete events (bytes ending in a blank line); it returns what to pass on and
    keeps the counts. `operation` is "chat" or "responses"."""

    def __init__(self, *, operation: str, service_tier: str | None, keep_usage: bool):
        self.chat = operation == "chat"
        self.service_tier = service_tier
        self.keep_usage = keep_usage  # False: the usage chunk the client did not ask for
        self.deltas = 0       # output deltas passed on
        self.usage: dict | None = None
        self.done = False     # [DONE] was seen (nothing after it is passed on)
        self.spaced: bool | None = None  # the upstream writes `"key": value` (None: unknown)
        if service_tier is not None:
            tier = orjson.dumps(service_tier)
            self._tier_field = b'"service_tier":' + tier
            self._tier_first = b'data: {"service_tier":' + tier + b","

    def feed(self, block: bytes) -> bytes:
        done = _DONE.search(block) if b"[DONE]" in block else None
        if done:
            end = block.find(EVENT_END, done.end())
            block = block[:len(block) if end < 0 else end + 2]
            self.done = True
        if self.chat:
            return self._chat(block)
        return self._responses(block)

    # --- chat completions --------------------------------------------------------------------
    def _chat(self, block: bytes) -> bytes:
        # Each check is one bytes search (C, fastest for long needles); the regular
        # expressions only where a server writes its JSON with spaces (`"key": value`), which
        # shows on every chunk's `"choices": [`.
        if self.spaced is None and b'"choices"' in block:
            # A server writes its JSON one way: the first chunk says which, once per stream.
            self.spaced = b'"choices": ' in block
        if self.spaced is not False:
            self.deltas += len(_CHAT_TEXT.findall(block))
            usage = b'"usage"' in block and _USAGE.search(block)
        else:  # compact JSON, as most servers write it
            self.deltas += block.count(b'"content":"') - block.count(b'"content":""')
            if _CHAT_RARE.search(block):
                for key in _CHAT_RARE_KEYS:
                    self.deltas += block.count(key + b'"') - block.count(key + b'""')
            usage = b'"usage":{' in block
        if b'"tool_calls"' in block:
            self.deltas += len(_CHAT_TOOL_CALLS.findall(block))
        if usage:
            block = self._chat_usage(block)
        if self.service_tier is not None:
            block = self._chat_tier(block)
        return block

    def _chat_usage(self, block: bytes) -> bytes:
        out = []
        for event in _events(block):
            if not _USAGE.search(event):
                out.append(event)
                continue
            chunk = _json_of(event)
            usage = chunk.get("usage") if isinstance(chunk, dict) else None
            if not isinstance(usage, dict):
                out.append(event)
                continue
            self.usage = usage
            if self.keep_usage or chunk.get("choices"):
                out.append(event)
        return b"".join(out)

    def _chat_tier(self, block: bytes) -> bytes:
        named = block.count(b'"service_tier"')
        if not named:
            # A server writes `data:{` on every event or on none; a block starts with an event.
            if block.startswith(b"data:{") or (not block.startswith(b"data: {")
                                               and b"data:{" in block):
                return _DATA_OBJECT.sub(self._tier_first, block)
            # Every event starts a line (the block starts with one, the others follow a
            # newline): "data: {" elsewhere is inside a string, where JSON escapes newlines.
            tiered = block.replace(b"\ndata: {", b"\n" + self._tier_first)
            if tiered.startswith(b"data: {"):  # (a view: the block is copied once, not twice)
                tiered = self._tier_first + memoryview(tiered)[7:]
            return tiered
        if named == len(_DATA_OBJECT.findall(block)):
            return _TIER.sub(self._tier_field, block)
        return b"".join(self._chat_tier(event) for event in _events(block))

    # --- the Responses API -------------------------------------------------------------------
    def _responses(self, block: bytes) -> bytes:
        self.deltas += len(_RESPONSES_DELTA.findall(block))
        if not _RESPONSE_OBJECT.search(block):
            return block
        return b"".join(self._response_event(e) if _RESPONSE_OBJECT.search(e) else e
                        for e in _events(block))

    def _response_event(self, event: bytes) -> bytes:
        data = _json_of(event)
        response = data.get("response") if isinstance(data, dict) else None
        if not isinstance(response, dict):
            return event
        if isinstance(response.get("usage"), dict):
            self.usage = response["usage"]
        if self.service_tier is None or response.get("service_tier") == self.service_tier:
            return event
        response["service_tier"] = self.service_tier
        return _data_replaced(event, orjson.dumps(data))


def _events(block: bytes) -> list[bytes]:
    """The events of a block, each with its blank line."""
    parts = block.split(EVENT_END)
    return [p + EVENT_END for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _data(event: bytes) -> bytes | None:
    """The data of one SSE event (its `data:` lines joined), None if it has none."""
    lines = [line[5:].lstrip(b" ") for line in event.split(b"\n") if line.startswith(b"data:")]
    return b"\n".join(lines).strip() if lines else None


def _json_of(event: bytes):
    payload = _data(event)
    if payload is None:
        return None
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError:
        return None


def _data_replaced(event: bytes, payload: bytes) -> bytes:
    """`event` with its data lines replaced by one line of `payload`; its other fields (event:,
    id:) kept in their place."""
    lines = [line for line in event.rstrip(b"\n").split(b"\n") if not line.startswith(b"data:")]
    return b"\n".join([*lines, b"data: " + payload]) + EVENT_END
