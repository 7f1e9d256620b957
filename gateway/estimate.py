"""The input-token estimate sent to authorize, before the upstream has counted anything.

No tokenizer runs on the request path (the gateway serves any model, and a tokenizer costs
more CPU than the whole proxying): text counts one token per 4 characters (rounded up, once
per request), OpenAI's rule of thumb for English. Per content type:

- a chat message or a Responses input item: 4 tokens plus what it carries; the reply's
  priming: 3 tokens;
- text (string content; `text`, `input_text`, `output_text` and `refusal` parts; `name`):
  its characters;
- a tool call in an assistant message (`tool_calls`, legacy `function_call`) and a Responses
  `function_call` item: the function's name and arguments, as characters;
- a Responses `function_call_output` item and a chat `tool` message: the output, as
  characters (a list of parts: each part by these rules);
- an image (`image_url`, `input_image`): 85 tokens at `detail: low`, else 765 (OpenAI's
  tile rule for a 768x768 image at high detail: 4 tiles of 170, plus 85); its URL or base64
  data is not text;
- audio (`input_audio`): one token per 100 ms of 16 kHz 16-bit mono audio (3,200 bytes of
  its base64 data, decoded);
- any other part or item (files, reasoning, tool items): its JSON's characters;
- `tools`, `functions`, `response_format`, and a Responses `text.format`: their JSON's
  characters.

The reservation is settled with the upstream's exact `usage`, so an estimate that is off only
shifts tokens between the reservation and the refund. When the upstream's usage never arrives
(a stream cancelled or broken before its usage chunk), the input billed is this estimate.
"""

import orjson

CHARS_PER_TOKEN = 4
PER_MESSAGE = 4
PRIMING = 3
IMAGE_LOW_TOKENS = 85
IMAGE_TOKENS = 765
AUDIO_BYTES_PER_TOKEN = 3_200
TEXT_PARTS = {"text", "input_text", "output_text", "refusal"}
IMAGE_PARTS = {"image_url", "input_image"}


class _Count:
    """Characters of text and tokens counted directly (images, audio, per-item overhead)."""

    __slots__ = ("chars", "tokens")

    def __init__(self):
        self.chars = self.tokens = 0

    def total(self) -> int:
        return -(-self.chars // CHARS_PER_TOKEN) + self.tokens

    def json(self, value) -> None:
        self.chars += len(orjson.dumps(value))

    def content(self, content) -> None:
        """A message's content: a string, or a list of parts."""
        if isinstance(content, str):
            self.chars += len(content)
        elif isinstance(content, list):
            for part in content:
                self.part(part)
        elif content is not None:
            self.json(content)

    def part(self, part) -> None:
        if isinstance(part, str):
            self.chars += len(part)
            return
        if not isinstance(part, dict):
            return
        kind = part.get("type")
        if kind in TEXT_PARTS:
            self.chars += len(_text(part.get("text") if kind != "refusal" else
                                    part.get("refusal")))
        elif kind in IMAGE_PARTS:
            detail = (part.get("image_url") if isinstance(part.get("image_url"), dict)
                      else part).get("detail")
            self.tokens += IMAGE_LOW_TOKENS if detail == "low" else IMAGE_TOKENS
        elif kind == "input_audio":
            data = (part.get("input_audio") or {}).get("data") or ""
            self.tokens += -(-(len(data) * 3 // 4) // AUDIO_BYTES_PER_TOKEN)
        else:
            self.json(part)

    def call(self, name, arguments) -> None:
        self.chars += len(_text(name)) + len(_text(arguments))

    def message(self, message) -> None:
        """A chat message, or a Responses input item."""
        if not isinstance(message, dict):
            return
        self.tokens += PER_MESSAGE
        kind = message.get("type")
        if kind == "function_call":
            self.call(message.get("name"), message.get("arguments"))
        elif kind == "function_call_output":
            self.content(message.get("output"))
        elif kind in (None, "message"):
            self.content(message.get("content"))
            self.chars += len(_text(message.get("name"))) + len(_text(message.get("refusal")))
            for call in message.get("tool_calls") or ():
                function = call.get("function") if isinstance(call, dict) else None
                if isinstance(function, dict):
                    self.call(function.get("name"), function.get("arguments"))
                else:
                    self.json(call)
            legacy = message.get("function_call")
            if isinstance(legacy, dict):
                self.call(legacy.get("name"), legacy.get("arguments"))
        else:
            self.json(message)


def _text(value) -> str:
    return value if isinstance(value, str) else ""


def chat_input_tokens(body: dict) -> int:
    count = _Count()
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else ():
        count.message(message)
    for extra in ("tools", "functions", "response_format"):
        if body.get(extra):
            count.json(body[extra])
    return count.total() + PRIMING


def responses_input_tokens(body: dict) -> int:
    count = _Count()
    count.chars += len(_text(body.get("instructions")))
    given = body.get("input")
    if isinstance(given, str):
        count.chars += len(given)
    elif isinstance(given, list):
        for item in given:
            count.message(item)
    if body.get("tools"):
        count.json(body["tools"])
    text = body.get("text")
    if isinstance(text, dict) and text.get("format"):
        count.json(text["format"])
    return count.total() + PRIMING


def max_output_tokens(body: dict) -> int | None:
    """The request's output ceiling (chat: max_completion_tokens or max_tokens; responses:
    max_output_tokens), None when it sets none or something that is not a positive int."""
    for name in ("max_completion_tokens", "max_tokens", "max_output_tokens"):
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None
