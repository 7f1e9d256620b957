"""Django's error answers (400, 403, 404, 500, and 405 of function views) in the one JSON
error shape for every path under /api/; elsewhere Django's own pages. Wired as config/urls.py's
handler400...handler500: they answer what no view did (no URL matched, a body past
DATA_UPLOAD_MAX_MEMORY_SIZE, an exception a view let through)."""

from functools import wraps

from django.http import HttpResponseNotAllowed, JsonResponse
from django.views import defaults

from sluice.error_format import error_body

API_PREFIX = "/api/"


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
