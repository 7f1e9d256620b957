"""The rate-limit headers a gateway forwards to its caller, OpenAI style."""

from quotas.limiter.schema import Decision
from quotas.limiter.state import BUCKET_SECONDS


def duration_format(ms: int) -> str:
    """OpenAI's format: 20ms, 1.2s, 6m0s, 1h2m3s."""
    if ms < 1000:
        return f"{max(ms, 0)}ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f}".rstrip("0").rstrip(".") + "s"
    seconds = ms // 1000
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return (f"{hours}h" if hours else "") + f"{minutes}m{seconds}s"


def ratelimit_headers(d: Decision) -> dict[str, str]:
    """OpenAI's names for the combined tokens (the tighter of input and output), the UTC day's
    tokens and concurrent requests; input and output tokens apart where the pool meters them
    apart (where it does not, one bucket meters both: the tokens headers). Each is the tighter
    of the key's slice and the org's allocation."""
    headers = {
        "x-ratelimit-limit-tokens": str(d.tokens_limit),
        "x-ratelimit-remaining-tokens": str(d.tokens_remaining),
        "x-ratelimit-reset-tokens": duration_format(d.tokens_reset_ms),
        "x-ratelimit-limit-tokens-day": str(d.day_limit),
        "x-ratelimit-remaining-tokens-day": str(d.day_remaining),
        "x-ratelimit-reset-tokens-day": duration_format(d.day_reset_ms),
        "x-ratelimit-limit-requests": str(d.requests_limit),
        "x-ratelimit-remaining-requests": str(d.requests_remaining),
        "x-ratelimit-reset-requests": duration_format(d.requests_reset_ms),
    }
    if d.input_limit:
        headers.update({
            "x-ratelimit-limit-input-tokens": str(d.input_limit),
            "x-ratelimit-remaining-input-tokens": str(d.input_remaining),
            "x-ratelimit-reset-input-tokens": duration_format(d.input_reset_ms),
            "x-ratelimit-limit-output-tokens": str(d.output_limit),
            "x-ratelimit-remaining-output-tokens": str(d.output_remaining),
            "x-ratelimit-reset-output-tokens": duration_format(d.output_reset_ms),
        })
    return headers


def tokens_refill_tps(d: Decision) -> int:
    """The tokens/s refilling the bucket the `x-ratelimit-*-tokens` headers describe (each
    bucket holds BUCKET_SECONDS of its rate): what a gateway needs for per-minute headers
    (Cerebras' `x-ratelimit-limit-tokens-minute` is 60 x this)."""
    return d.tokens_limit // BUCKET_SECONDS
