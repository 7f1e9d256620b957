"""The one error shape of every JSON answer, its one builder, and the domain errors services
raise:

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

Each domain error carries its `code`, an HTTP status, and optionally `fields` and `details`,
so the REST API, the admin, the console and the portal report the same failure the same way.
sluice/error_responses.py turns them, and Django's and DRF's own errors, into answers.
"""

from django.http import Http404

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


class DomainError(Exception):
    status = 400
    code = "invalid"

    def __init__(self, message: str, *, code: str | None = None, fields: dict | None = None,
                 details: dict | None = None):
        super().__init__(message)
        self.message = message
        self.fields = fields or {}
        self.details = details or {}
        if code is not None:
            self.code = code


class NotFound(DomainError, Http404):
    """Also used for "exists but belongs to another org": both look the same from outside.
    An Http404 as well, so one selector serves the REST API (our error body) and server-rendered
    pages (Django's 404) alike."""

    status = 404
    code = "not_found"


class PermissionDenied(DomainError):
    status = 403
    code = "permission_denied"


class Conflict(DomainError):
    status = 409
    code = "conflict"


class IllegalTransition(Conflict):
    code = "illegal_transition"


class Unprocessable(DomainError):
    status = 422
    code = "unprocessable"


class RateLimited(DomainError):
    """Too many of something in a window: the REST API adds `Retry-After`."""

    status = 429
    code = "rate_limited"

    def __init__(self, message: str, *, retry_after_seconds: int, **kwargs):
        super().__init__(message, details={"retry_after_seconds": retry_after_seconds},
                         **kwargs)
        self.retry_after_seconds = retry_after_seconds
