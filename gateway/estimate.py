"""The input-token estimate sent to authorize, before the upstream has counted anything.

No tokenizer runs on the request path (the gateway serves any model, and a tokenizer costs
more CPU than the whole proxying): the estimate is one token per 4 characters of text
(rounded up) plus 4 tokens per message and 3 for the reply's priming, OpenAI's rule of thumb
for English chat. Tool and function definitions and a response_format schema count by their
JSON's length. The reservation is settled with the upstream's exact `usage` (prompt_tokens),
so an estimate that is off only shifts tokens between the reservation and the refund.
"""

import orjson

CHARS_PER_TOKEN = 4
PER_MESSAGE = 4
PRIMING = 3


def _text_chars(content) -> int:
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):  # content parts: count the text ones
        return sum(len(p.get("text") or "") for p in content if isinstance(p, dict))
    return 0


def _ceil_tokens(chars: int) -> int:
    return -(-chars // CHARS_PER_TOKEN)


def chat_input_tokens(body: dict) -> int:
    messages = body.get("messages") or []
    chars = sum(_text_chars(m.get("content")) + len(m.get("name") or "")
                for m in messages if isinstance(m, dict))
    for extra in ("tools", "functions", "response_format"):
        if body.get(extra):
            chars += len(orjson.dumps(body[extra]))
    return _ceil_tokens(chars) + PER_MESSAGE * len(messages) + PRIMING


def responses_input_tokens(body: dict) -> int:
    given = body.get("input")
    if isinstance(given, str):
        return _ceil_tokens(len(given) + len(body.get("instructions") or "")) + PRIMING
    items = given if isinstance(given, list) else []
    return chat_input_tokens({"messages": [{"content": body.get("instructions") or ""}, *items],
                              "tools": body.get("tools")})


def max_output_tokens(body: dict) -> int | None:
    """The request's output ceiling (chat: max_completion_tokens or max_tokens; responses:
    max_output_tokens), None when it sets none or something that is not a positive int."""
    for name in ("max_completion_tokens", "max_tokens", "max_output_tokens"):
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None
