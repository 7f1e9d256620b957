"""Every REST API error in the one shape (sluice/error_format.py):

    {"error": {"code": "...", "message": "...", "fields": {...}, "details": {...}}}

DRF's own exceptions (validation, authentication, throttling, 404) and our DomainErrors all pass
through `exception_handler`, so clients parse exactly one shape.
"""

import time

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response
from rest_framework.views import set_rollback

from sluice.error_format import error_body
from sluice.errors import DomainError, RateLimited
from sluice.time_buckets import BucketError, bucket_page

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


class RequiredBooleanField(serializers.BooleanField):
    """A boolean the client must give. DRF reads a form body without the field as false (an
    unticked HTML checkbox), so a form PUT of auto-admission without `auto_admit` turned it
    off: here it is missing, a 400 (found by schemathesis's negative data)."""

    default_empty_html = serializers.empty


def validated_input(serializer_class, data, *, partial: bool = False,
                    context: dict | None = None) -> dict:
    """Parse a view's input with its Input serializer (`context`: what its checks need to
    know besides the input); malformed input raises (-> 400). The one way every API view reads
    its body and query parameters."""
    serializer = serializer_class(data=data, partial=partial, context=context or {})
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


class BucketQueryInput(serializers.Serializer):
    """The time window of OpenAI's organization Usage and Costs APIs (sluice/time_buckets.py)."""

    start_time = serializers.IntegerField(min_value=0, help_text="Unix seconds, inclusive.")
    end_time = serializers.IntegerField(
        min_value=0, required=False,
        help_text="Unix seconds, exclusive. Default: now.")
    limit = serializers.IntegerField(required=False, help_text="Buckets per page.")
    page = serializers.CharField(required=False, max_length=40,
                                 help_text="`next_page` of the previous response.")

    # (default, maximum) buckets per page when not the width's usual ones.
    page_limits: tuple[int, int] | None = None

    def validate(self, data):
        data.setdefault("end_time", int(time.time()))
        try:
            data["window"] = bucket_page(
                width=data.get("bucket_width", "1d"), start_time=data["start_time"],
                end_time=data["end_time"], limit=data.get("limit"), page=data.get("page"),
                limits=self.page_limits)
        except BucketError as exc:
            raise serializers.ValidationError({exc.field: [exc.message]}) from exc
        return data


def bucket_page_output(name: str, result: serializers.Serializer) -> serializers.Serializer:
    """For OpenAPI: OpenAI's page of time buckets (sluice/time_buckets.py) around `result`."""
    from drf_spectacular.utils import inline_serializer

    bucket = inline_serializer(f"{name}Bucket", {
        "object": serializers.ChoiceField(choices=["bucket"]),
        "start_time": serializers.IntegerField(), "end_time": serializers.IntegerField(),
        "results": result})
    return inline_serializer(f"{name}Page", {
        "object": serializers.ChoiceField(choices=["page"]),
        "data": serializers.ListSerializer(child=bucket),
        "has_more": serializers.BooleanField(),
        "next_page": serializers.CharField(allow_null=True)})
