"""The gateway hook as Django views: POST /api/gateway/v1/authorize here, and /usage served by
metering (metering/api/hook.py) through `hook_view`.

Lean views, not DRF: authorize runs before every inference request, and DRF's negotiation,
parsers and serializers would cost more than the Redis round trip itself. The logic lives in
hook.py; the contract is documented in OpenAPI by the schema-only views in schema.py.
"""

import orjson
from django.conf import settings
from django.http import HttpResponse
from django.views.decorators.csrf import csrf_exempt

from quotas.hook.hook import authorize_call
from quotas.hook.inputs import body_read


def _respond(request, call) -> HttpResponse:
    # The body straight from the WSGI stream (request.body would read a chunked body as empty
    # and answer an oversized one with an HTML 400), by the fast path's own rule.
    status, body = call(method=request.method,
                        authorization=request.META.get("HTTP_AUTHORIZATION", ""),
                        read_body=lambda: body_read(
                            request.META, limit=settings.DATA_UPLOAD_MAX_MEMORY_SIZE))
    response = HttpResponse(orjson.dumps(body), status=status, content_type="application/json")
    if status == 405:
        response["Allow"] = "POST"
    return response


def hook_view(call):
    """The Django view of a hook call (`authorize_call`, metering's `usage_call`)."""
    @csrf_exempt
    def view(request):
        return _respond(request, call)

    view.__name__ = call.__name__.removesuffix("_call")
    return view


authorize = hook_view(authorize_call)
