"""Domain errors. Services raise these; sluice.api maps them to the one error shape
(sluice/error_format.py).

Each error carries a stable machine-readable `code`, an HTTP status, and optionally `fields` (the
bad input fields, each with its problems) and `details` (named facts about the refusal), so the
REST API, the admin, the console and the portal report the same failure the same way.
"""


from django.http import Http404


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
