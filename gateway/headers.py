"""The rate-limit headers the gateway answers with: Sluice's (OpenAI's names, built by the
hook), and beside them the per-minute names clients of Cerebras' API parse.

Cerebras (inference-docs.cerebras.ai, rate limits) sends `x-ratelimit-{limit,remaining,
reset}-tokens-minute` and `-requests-day`. Sluice limits tokens with a bucket that refills at a
rate (tokens/s), not per minute, and has no requests-per-day limit, so:

| Cerebras header | Sluice's value |
| --- | --- |
| `x-ratelimit-limit-tokens-minute` | 60 x the bucket's refill rate (`tokens_refill_tps`) |
| `x-ratelimit-remaining-tokens-minute` | the bucket's level (`x-ratelimit-remaining-tokens`) |
| `x-ratelimit-reset-tokens-minute` | seconds (a decimal number) until the bucket is full |
| `x-ratelimit-*-requests-day` | not sent: Sluice does not limit requests per day |
"""

import re

_DURATION = re.compile(r"(?:(\d+)h)?(?:(\d+)m(?!s))?(?:([\d.]+)s)?(?:(\d+)ms)?")


def duration_seconds(text: str) -> float | None:
    """The hook's reset durations (OpenAI's format: 20ms, 1.2s, 6m0s, 1h2m3s) in seconds."""
    found = _DURATION.fullmatch(text)
    if not found or not text:
        return None
    hours, minutes, seconds, millis = found.groups()
    return (int(hours or 0) * 3600 + int(minutes or 0) * 60 + float(seconds or 0)
            + int(millis or 0) / 1000)


def answer_headers(hook_headers: dict, refill_tps: int | None) -> dict[str, str]:
    """The hook's headers as they are, and the per-minute ones mapped from them (when the
    hook said the refill rate: older Sluice versions do not)."""
    headers = {k: str(v) for k, v in hook_headers.items()}
    remaining = headers.get("x-ratelimit-remaining-tokens")
    reset = duration_seconds(headers.get("x-ratelimit-reset-tokens", ""))
    if refill_tps is None or remaining is None or reset is None:
        return headers
    headers["x-ratelimit-limit-tokens-minute"] = str(60 * refill_tps)
    headers["x-ratelimit-remaining-tokens-minute"] = remaining
    headers["x-ratelimit-reset-tokens-minute"] = f"{reset:.3f}".rstrip("0").rstrip(".")
    return headers
