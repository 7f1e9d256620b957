"""The gateway hook as Django views: POST /api/gateway/v1/authorize and /usage.

Lean views, not DRF: authorize runs before every inference request, and DRF's negotiation,
parsers and serializers would cost more than the Redis round trip itself. The logic lives in
hook.py; the contract is documented in OpenAPI by the schema-only views in schema.py.
"""

import orjson
from django.conf import settings
from django.http import HttpResponse
from django.views.decorators.csrf import csrf_exempt

from quotas.hook.hook import authorize_call, usage_call
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


@csrf_exempt
def authorize(request):
    return _respond(request, authorize_call)


@csrf_exempt
def usage(request):
    return _respond(request, usage_call)
