"""The one error shape of every JSON answer, and its one builder:

    {"error": {"code": "...", "message": "...", "fields": {...}, "details": {...}}}

- `code`: stable and machine-readable (`capacity_exhausted`, `invalid_input`, ...).
- `message`: for people; may change.
- `fields` (only when input was wrong): each bad input field, by name, with its problems.
- `details` (only when a refusal has facts worth acting on): named values, like the free
  tokens/s of a `capacity_exhausted` or the state that made a transition illegal.
- `retry_after_ms` (only on the gateway hook's 429 and 503): when the same request may pass;
  null when waiting will not help.
- `retryable` (only on the gateway hook): false when sending the same request again cannot
  help soon (a gateway passes it on as `x-should-retry`, which the OpenAI SDK honours).

No Django imports: the gateway hook's WSGI fast path uses it, and so can a gateway without Django.
"""

_ABSENT = object()


def error_body(*, code: str, message: str, fields: dict | None = None,
               details: dict | None = None, retry_after_ms: int | None | object = _ABSENT,
               retryable: bool | None = None) -> dict:
    error: dict = {"code": code, "message": message}
    if fields:
        error["fields"] = fields
    if details:
        error["details"] = details
    if retry_after_ms is not _ABSENT:
        error["retry_after_ms"] = retry_after_ms
    if retryable is not None:
        error["retryable"] = retryable
    return {"error": error}
