"""The gateway hook as Django views: POST /api/gateway/v1/authorize and /usage.

Lean views, not DRF: authorize runs before every inference request, and DRF's negotiation,
parsers and serializers would cost more than the Redis round trip itself. The logic lives in
hook.py; the contract is documented in OpenAPI by the schema-only views in schema.py.
"""

import orjson
from django.http import HttpResponse
from django.views.decorators.csrf import csrf_exempt

from quotas.gateway.hook import authorize_handle, hook_call, usage_handle
from quotas.gateway.metrics import AUTHORIZE_SECONDS, USAGE_SECONDS


def _respond(request, handler, histogram) -> HttpResponse:
    status, body = hook_call(handler, histogram, method=request.method,
                             authorization=request.META.get("HTTP_AUTHORIZATION", ""),
                             body=request.body)
    return HttpResponse(orjson.dumps(body), status=status, content_type="application/json")


@csrf_exempt
def authorize(request):
    return _respond(request, authorize_handle, AUTHORIZE_SECONDS)


@csrf_exempt
def usage(request):
    return _respond(request, usage_handle, USAGE_SECONDS)
