"""The rate-limit headers a gateway forwards to its caller, OpenAI style."""

from quotas.limiter.schema import Decision


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
    if d.retry_after_ms is not None and not d.allowed:
        headers["retry-after"] = str(max(1, -(-d.retry_after_ms // 1000)))
        headers["retry-after-ms"] = str(d.retry_after_ms)
    return headers
