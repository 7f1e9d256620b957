"""Every error answered over HTTP, in the one shape (sluice/errors.py):

- the REST API's: DRF's own exceptions (validation, authentication, throttling, 404) and our
  DomainErrors all pass through `exception_handler` (REST_FRAMEWORK's EXCEPTION_HANDLER);
- Django's (400, 403, 404, 500, and 405 of function views), for every path under /api/;
  elsewhere Django's own pages. Wired as config/urls.py's handler400...handler500: they answer
  what no view did (no URL matched, a body past DATA_UPLOAD_MAX_MEMORY_SIZE, an exception a
  view let through).
"""

from functools import wraps

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404, HttpResponseNotAllowed, JsonResponse
from django.views import defaults
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import set_rollback

from sluice.errors import DomainError, RateLimited, error_body

API_PREFIX = "/api/"

_DRF_CODES = {
    exceptions.ValidationError: "invalid_input",
    exceptions.ParseError: "malformed_request",
    exceptions.NotAuthenticated: "not_authenticated",
    exceptions.AuthenticationFailed: "authentication_failed",
    exceptions.PermissionDenied: "permission_denied",
    exceptions.NotFound: "not_found",
    exceptions.MethodNotAllowed: "method_not_allowed",
    exceptions.UnsupportedMediaType: "unsupported_media_type",
    exceptions.Throttled: "throttled",
}


def _validation_fields(detail) -> dict:
    if isinstance(detail, dict):
        return {key: _validation_fields(value) for key, value in detail.items()}
    if isinstance(detail, list):
        if all(isinstance(item, str) for item in detail):
            return [str(item) for item in detail]
        return [_validation_fields(item) for item in detail]
    return [str(detail)]


def exception_handler(exc, context):
    if isinstance(exc, DomainError):
        set_rollback()
        headers = ({"Retry-After": str(exc.retry_after_seconds)}
                   if isinstance(exc, RateLimited) else None)
        return Response(error_body(code=exc.code, message=exc.message, fields=exc.fields,
                                   details=exc.details), status=exc.status, headers=headers)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    if not isinstance(exc, exceptions.APIException):
        return None
    set_rollback()
    code = next((c for cls, c in _DRF_CODES.items() if isinstance(exc, cls)), "error")
    headers = {}
    if getattr(exc, "auth_header", None):
        headers["WWW-Authenticate"] = exc.auth_header
    if getattr(exc, "wait", None):
        headers["Retry-After"] = str(int(exc.wait))
    if isinstance(exc, exceptions.ValidationError):
        detail = exc.detail
        fields = _validation_fields(detail) if isinstance(detail, dict) else None
        message = "The request is invalid."
        if not fields:
            message = "; ".join(_validation_fields(detail)) or message
        body = error_body(code=code, message=message, fields=fields)
        return Response(body, status=status.HTTP_400_BAD_REQUEST, headers=headers)
    return Response(
        error_body(code=code, message=str(exc.detail)), status=exc.status_code, headers=headers
    )



def _json(code: str, message: str, status: int) -> JsonResponse:
    return JsonResponse(error_body(code=code, message=message), status=status)


def bad_request(request, exception=None):
    if request.path.startswith(API_PREFIX):
        return _json("malformed_request", "The request could not be read (too large or "
                     "malformed).", 400)
    return defaults.bad_request(request, exception)


def permission_denied(request, exception=None):
    if request.path.startswith(API_PREFIX):
        return _json("permission_denied", "You may not do this.", 403)
    return defaults.permission_denied(request, exception)


def page_not_found(request, exception=None):
    if request.path.startswith(API_PREFIX):
        return _json("not_found", "Nothing here.", 404)
    return defaults.page_not_found(request, exception)


def server_error(request):
    if request.path.startswith(API_PREFIX):
        return _json("internal_error", "The server failed to answer; try again.", 500)
    return defaults.server_error(request)


class ApiNotFoundMiddleware:
    """With DEBUG on (`dev.py run`), Django answers a URL that matches nothing with its
    technical HTML page, whatever handler404 says: under /api/ that answer is the one JSON
    shape too. (DEBUG's 500 page stays: it is for the developer at the console.)"""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if (response.status_code == 404 and request.path.startswith(API_PREFIX)
                and response.get("Content-Type", "").startswith("text/html")):
            return page_not_found(request)
        return response


def require_post_json(view):
    """require_POST, answering the one error shape (and Allow) to other methods."""
    @wraps(view)
    def checked(request, *args, **kwargs):
        if request.method != "POST":
            response = _json("method_not_allowed", "Use POST.", 405)
            response["Allow"] = HttpResponseNotAllowed(["POST"])["Allow"]
            return response
        return view(request, *args, **kwargs)
    return checked
