"""OpenAPI description of the hook API.

The hook views are plain Django functions (see views.py). drf-spectacular documents only DRF
views, so each URL's function carries a schema-only APIView (`documented_by`): the generator
reads its `extend_schema`, while requests are served by the function and never reach the class.
"""

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import OpenApiExample, PolymorphicProxySerializer, extend_schema
from rest_framework import authentication, exceptions, serializers
from rest_framework.parsers import JSONParser
from rest_framework.views import APIView

from quotas.gateway.inputs import MAX_EVENTS, REQUEST_ID, USAGE_STATUSES
from quotas.gateway.tokens import gateway_authenticate


class GatewayTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer gw_...` (used by the schema; the hook views check it directly)."""

    def authenticate(self, request):
        identity = gateway_authenticate(request.headers.get("Authorization", ""))
        if identity is None:
            raise exceptions.AuthenticationFailed("Invalid gateway token.")
        return None, identity


class GatewayTokenScheme(OpenApiAuthenticationExtension):
    target_class = GatewayTokenAuthentication
    name = "gatewayToken"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "bearerFormat": "gw_<lookup>_<secret>",
                "description": "A gateway token created by an operator "
                               "(`manage.py gateway_token_create`)."}


def documented_by(schema_view: type[APIView]):
    def attach(view):
        view.cls, view.initkwargs = schema_view, {}
        return view
    return attach


RATELIMIT_HEADERS = [
    f"x-ratelimit-{kind}-{what}"
    for what in ("tokens", "tokens-day", "requests") for kind in ("limit", "remaining", "reset")
]
RateLimitHeaders = type("RateLimitHeaders", (serializers.Serializer,), {
    **{name: serializers.CharField() for name in RATELIMIT_HEADERS},
    "retry-after": serializers.CharField(required=False, help_text="Seconds, on 429 only."),
    "retry-after-ms": serializers.CharField(required=False, help_text="On 429 only."),
    "__doc__": "Headers to forward to the caller. Limits: tokens = the TPS bucket "
               "((guaranteed + burst) TPS x 10 s), tokens-day = the UTC day's quota, "
               "requests = concurrent requests. Resets are durations like 20ms, 1.2s, 6m0s.",
})


class ErrorDetail(serializers.Serializer):
    """The one error shape (sluice/error_format.py)."""

    code = serializers.CharField()
    message = serializers.CharField()
    fields = serializers.DictField(required=False, help_text="Each bad input field's problems.")
    details = serializers.DictField(required=False, help_text="Facts about the refusal.")


class ErrorResponse(serializers.Serializer):
    error = ErrorDetail()


class Authorize(serializers.Serializer):
    request_id = serializers.RegexField(REQUEST_ID, max_length=128,
                                        help_text="Unique per inference request; retries reuse "
                                                  "it and get the same reservation.")
    api_key = serializers.CharField(help_text="The caller's API key, as presented.")
    model = serializers.CharField(max_length=100)
    region = serializers.CharField(max_length=50, required=False,
                                   help_text="Needed when the model is served in several.")
    input_tokens = serializers.IntegerField(min_value=0, help_text="Estimate.")
    max_output_tokens = serializers.IntegerField(min_value=1)
    dry_run = serializers.BooleanField(required=False, default=False,
                                       help_text="Check only; reserve nothing.")


class AuthorizeAllowed(serializers.Serializer):
    allowed = serializers.BooleanField()
    reservation_id = serializers.CharField(
        allow_null=True, help_text="Quote it in the usage report (null on dry_run).")
    org = serializers.IntegerField(help_text="The caller's organization id.")
    reserved_tokens = serializers.IntegerField(help_text="input_tokens + max_output_tokens.")
    headers = RateLimitHeaders()
    dry_run = serializers.BooleanField(required=False)
    limiter = serializers.ChoiceField(
        choices=["fail_open"], required=False,
        help_text="Present when Redis was unreachable and the pool fails open: admitted under "
                  "a per-process local limit at the guaranteed rate.")


class RefusalDetail(ErrorDetail):
    retry_after_ms = serializers.IntegerField(required=False, allow_null=True)


class AuthorizeRefused(serializers.Serializer):
    allowed = serializers.BooleanField()
    error = RefusalDetail(help_text=(
        "429: tps_exceeded, daily_quota_exhausted, concurrency_exceeded, "
        "pool_capacity_exhausted. 401: invalid_api_key. 403: org_not_active, "
        "payment_required, no_allocation, spend_cap_reached. 409: request_id_conflict."))
    headers = RateLimitHeaders(required=False)


class AuthorizeSchema(APIView):
    authentication_classes = [GatewayTokenAuthentication]
    permission_classes: list = []
    parser_classes = [JSONParser]

    @extend_schema(
        operation_id="gateway_authorize", tags=["gateway"],
        summary="Authorize one inference request (one Redis round trip)",
        request=Authorize,
        responses={200: AuthorizeAllowed, 400: ErrorResponse, 401: AuthorizeRefused,
                   403: AuthorizeRefused, 404: ErrorResponse, 409: AuthorizeRefused,
                   429: AuthorizeRefused, 503: ErrorResponse},
        examples=[OpenApiExample("request", request_only=True, value={
            "request_id": "req_01HX", "api_key": "sk_0123456789ab_...", "model": "fast-70b",
            "region": "us-east", "input_tokens": 900, "max_output_tokens": 600})],
    )
    def post(self, request):
        raise NotImplementedError("served by quotas.gateway.views.authorize")


class UsageEvent(serializers.Serializer):
    request_id = serializers.RegexField(REQUEST_ID, max_length=128)
    reservation_id = serializers.CharField(
        required=False, help_text="What authorize returned. Lets usage be attributed when "
                                  "Redis no longer holds the reservation (expired, or "
                                  "admitted while failing open); without it such usage is "
                                  "rejected with code unknown_request.")
    input_tokens = serializers.IntegerField(min_value=0)
    output_tokens = serializers.IntegerField(min_value=0)
    status = serializers.ChoiceField(choices=USAGE_STATUSES)
    started_at = serializers.DateTimeField()
    first_token_at = serializers.DateTimeField(allow_null=True, required=False)
    finished_at = serializers.DateTimeField()


class UsageBatch(serializers.Serializer):
    events = UsageEvent(many=True, help_text=f"1 to {MAX_EVENTS} events.")


class UsageResult(serializers.Serializer):
    request_id = serializers.CharField()
    result = serializers.ChoiceField(choices=["recorded", "duplicate", "rejected"])
    error = ErrorDetail(required=False, help_text="When rejected: unknown_request, "
                                                  "invalid_reservation.")


class UsageResponse(serializers.Serializer):
    results = UsageResult(many=True)
    recorded = serializers.IntegerField()
    duplicates = serializers.IntegerField()
    rejected = serializers.IntegerField()


class UsageSchema(APIView):
    authentication_classes = [GatewayTokenAuthentication]
    permission_classes: list = []
    parser_classes = [JSONParser]

    @extend_schema(
        operation_id="gateway_usage", tags=["gateway"],
        summary="Report usage: one event, or {\"events\": [...]} (up to 1,000)",
        description="Every event is durable in PostgreSQL before the answer. Idempotent by "
                    "request_id: a duplicate is acknowledged and never counted twice. A "
                    "malformed body is a 400 and writes nothing.",
        request=PolymorphicProxySerializer(component_name="Usage",
                                           serializers=[UsageEvent, UsageBatch],
                                           resource_type_field_name=None),
        responses={200: UsageResponse, 400: ErrorResponse, 401: ErrorResponse},
    )
    def post(self, request):
        raise NotImplementedError("served by quotas.gateway.views.usage")
