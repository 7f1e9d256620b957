"""OpenAPI description of the hook API.

The hook views are plain Django functions (see views.py). drf-spectacular documents only DRF
views, so each URL's function carries a schema-only APIView (`documented_by`): the generator
reads its `extend_schema`, while requests are served by the function and never reach the class.
"""

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import authentication, exceptions, serializers
from rest_framework.parsers import JSONParser
from rest_framework.views import APIView

from quotas.hook.gateway_tokens import gateway_authenticate
from quotas.hook.inputs import (
    GATEWAY_PROCESS,
    MAX_TOKENS,
    REQUEST_ID,
    SERVICE_TIERS,
)
from sluice.openapi import Error, ErrorDetail


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
APART_HEADERS = [
    f"x-ratelimit-{kind}-{what}"
    for what in ("input-tokens", "output-tokens") for kind in ("limit", "remaining", "reset")
]
def _headers_serializer(name: str, *, on_refusal: bool) -> type[serializers.Serializer]:
    """The headers a gateway forwards: an admission carries every limit; a refusal always
    carries x-should-retry, and the limits only when the caller has some (not for an unknown
    key or an org without an allocation)."""
    return type(name, (serializers.Serializer,), {
        **{header: serializers.CharField(required=not on_refusal) for header in RATELIMIT_HEADERS},
        **{header: serializers.CharField(
            required=False, help_text="Where the pool meters input (prefill) and output "
            "(decode) tokens apart; elsewhere one bucket meters both and the tokens headers "
            "say it all.")
           for header in APART_HEADERS},
        "retry-after": serializers.CharField(required=False,
                                             help_text="Seconds, on 429 and 503 only."),
        "retry-after-ms": serializers.CharField(required=False, help_text="On 429 and 503 only."),
        "x-should-retry": serializers.ChoiceField(
            choices=["true", "false"], required=on_refusal,
            help_text="On every refusal: whether the same request may pass soon (the OpenAI SDK "
                      "honours it; `false` for daily_quota_exhausted, spend_cap_reached, unknown "
                      "keys, inactive orgs)."),
        "__doc__": "Headers to forward to the caller. Limits: tokens = the TPS buckets "
                   "(x-ratelimit-limit-tokens = the allocation's burst_tps x 10 s; where input "
                   "and output are metered apart, whichever of the two has the smaller share "
                   "left), tokens-day = the UTC day's quota, requests = concurrent requests; "
                   "each is the tighter of the API key's own slice and the org's allocation. "
                   "Resets are durations like 20ms, 1.2s, 6m0s.",
    })


RateLimitHeaders = _headers_serializer("RateLimitHeaders", on_refusal=False)
RefusalHeaders = _headers_serializer("RefusalHeaders", on_refusal=True)


class Authorize(serializers.Serializer):
    request_id = serializers.RegexField(REQUEST_ID, max_length=128,
                                        help_text="Unique per inference request; retries reuse "
                                                  "it and get the same reservation.")
    api_key = serializers.CharField(help_text="The caller's API key, as presented.")
    model = serializers.CharField(max_length=100)
    region = serializers.CharField(max_length=50, required=False,
                                   help_text="Needed when the model is served in several.")
    input_tokens = serializers.IntegerField(min_value=0, max_value=MAX_TOKENS,
                                            help_text="Estimate.")
    max_output_tokens = serializers.IntegerField(
        min_value=1, max_value=MAX_TOKENS, required=False,
        help_text="The request's max_tokens (max_completion_tokens, max_output_tokens). "
                  "Sluice reserves the smaller of it and its output estimate (the p95 of the "
                  "output lengths recently seen for the key or org in the pool, the pool's "
                  "default before there is history). Absent: the estimate alone.")
    dry_run = serializers.BooleanField(required=False, default=False,
                                       help_text="Check only; reserve nothing.")
    service_tier = serializers.ChoiceField(
        choices=list(SERVICE_TIERS), required=False, default="auto",
        help_text="OpenAI's names. auto (default): the API key's default tier if it has one, "
                  "else the fast pool, and the standard pool when the fast one refuses for "
                  "TPS or capacity (or the org has no allocation there); priority: fast pools "
                  "only; default: standard pools only.")
    lease = serializers.BooleanField(
        required=False, default=False,
        help_text="true: a lease (docs/hook.md, Leases), living the pool's lease TTL unless "
                  "renewed (leases/heartbeat), freed by leases/release, billed from its last "
                  "progress (status interrupted) if it expires. false: today's reservation.")
    gateway_process = serializers.RegexField(
        GATEWAY_PROCESS, max_length=64, required=False,
        help_text="Required with lease: the gateway process holding it (a uuid4 hex per "
                  "process is fine); only it may renew or release it.")


class ServedPool(serializers.Serializer):
    id = serializers.IntegerField()
    model = serializers.CharField()
    region = serializers.CharField()
    tier = serializers.ChoiceField(choices=["fast", "standard"])


class Lease(serializers.Serializer):
    id = serializers.CharField(help_text="The lease's id: the same as reservation_id.")
    ttl_ms = serializers.IntegerField(help_text="How long it lives without a heartbeat (the "
                                                "pool's lease TTL).")
    heartbeat_ms = serializers.IntegerField(help_text="How often to renew it: a third of the "
                                                      "TTL, within 2,000-5,000.")


class AuthorizeAllowed(serializers.Serializer):
    allowed = serializers.BooleanField()
    reservation_id = serializers.CharField(
        allow_null=True, help_text="Quote it in the usage report (null on dry_run).")
    org = serializers.IntegerField(help_text="The caller's organization id.")
    pool = ServedPool(help_text="The pool that serves the request: forward it to this pool's "
                                "upstream.")
    service_tier = serializers.ChoiceField(
        choices=["priority", "default"],
        help_text="The tier that serves it (fast: priority, standard: default); return it in "
                  "the response's service_tier, as OpenAI does.")
    reserved_tokens = serializers.IntegerField(
        help_text="reserved_input_tokens + reserved_output_tokens.")
    reserved_input_tokens = serializers.IntegerField(help_text="input_tokens.")
    reserved_output_tokens = serializers.IntegerField(
        help_text="The smaller of max_output_tokens and the output estimate. Usage beyond it "
                  "is debited when reported (the buckets may owe tokens), the rest refunded.")
    headers = RateLimitHeaders()
    lease = Lease(required=False, help_text="When asked for (not on dry_run, nor when admitted "
                                            "failing open).")
    dry_run = serializers.BooleanField(required=False)
    limiter = serializers.ChoiceField(
        choices=["fail_open"], required=False,
        help_text="Present when Redis was unreachable and the pool fails open: admitted under "
                  "a per-process local limit at the guaranteed rate.")


class RefusalDetail(ErrorDetail):
    retry_after_ms = serializers.IntegerField(
        required=False, allow_null=True,
        help_text="429 and 503: when the same request may pass (daily_quota_exhausted: the "
                  "next 00:00 UTC); null when waiting will not help.")
    retryable = serializers.BooleanField(
        help_text="False when retrying the same request cannot help soon; the same fact as "
                  "the x-should-retry header.")
    scope = serializers.ChoiceField(
        choices=["org", "key"], required=False,
        help_text="On a refusal by a limit: the org's allocation, or the API key's own slice.")
    limit = serializers.ChoiceField(
        choices=["input", "output"], required=False,
        help_text="On tps_exceeded and pool_capacity_exhausted: which tokens ran out (where "
                  "input is metered with output, output).")


class AuthorizeRefused(serializers.Serializer):
    allowed = serializers.BooleanField()
    error = RefusalDetail(help_text=(
        "429: tps_exceeded, daily_quota_exhausted, concurrency_exceeded, "
        "pool_capacity_exhausted. 401: invalid_api_key. 403: org_not_active, "
        "payment_required, no_allocation, spend_cap_reached (the request's worst-case price "
        "does not fit the cap minus month to date minus money held by requests in flight). "
        "409: request_id_conflict. 404: unknown_model. 503: limiter_unavailable."))
    headers = RefusalHeaders()


class AuthorizeUnauthorized(AuthorizeRefused):
    """401: an invalid gateway token is answered with the error alone (invalid_gateway_token);
    an invalid API key with a refusal (invalid_api_key)."""

    allowed = serializers.BooleanField(required=False)
    headers = RefusalHeaders(required=False)


class AuthorizeSchema(APIView):
    authentication_classes = [GatewayTokenAuthentication]
    permission_classes: list = []
    parser_classes = [JSONParser]

    @extend_schema(
        operation_id="gateway_authorize", tags=["gateway"],
        summary="Authorize one inference request (one Redis round trip)",
        request=Authorize,
        responses={200: AuthorizeAllowed, 400: Error, 401: AuthorizeUnauthorized,
                   403: AuthorizeRefused, 404: AuthorizeRefused, 409: AuthorizeRefused,
                   429: AuthorizeRefused, 503: AuthorizeRefused},
        examples=[OpenApiExample("request", request_only=True, value={
            "request_id": "req_01HX", "api_key": "sk_0123456789ab_...", "model": "fast-70b",
            "region": "us-east", "input_tokens": 900, "max_output_tokens": 600,
            "service_tier": "auto"})],
    )
    def post(self, request):
        raise NotImplementedError("served by quotas.hook.views.authorize")

