"""OpenAPI description of the hook API.

The hook is answered on the event loop before Django (quotas/hook/asgi.py, config/asgi.py).
drf-spectacular documents Django URLs, so each hook path has one in Django's URLconf
(urls.py) whose view only carries a schema-only APIView (`schema_only`): the generator reads
its `extend_schema`; a request that reaches it (a server that is not config.asgi) is told
where the hook is served.
"""

from django.http import JsonResponse
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import OpenApiExample, PolymorphicProxySerializer, extend_schema
from rest_framework import authentication, exceptions, serializers
from rest_framework.parsers import JSONParser
from rest_framework.views import APIView

from quotas.hook.gateway_tokens import gateway_authenticate
from quotas.hook.inputs import (
    AUTHORIZE_BATCH_MAX,
    GATEWAY_PROCESS,
    MAX_EVENTS,
    MAX_TOKENS,
    REQUEST_ID,
    SERVICE_TIERS,
    USAGE_STATUSES,
)
from sluice.errors import error_body
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


# Describes one hook endpoint for the OpenAPI schema (its `post`, under `extend_schema`,
# raises): config/asgi.py serves the endpoint, `schema_only` routes the description. No
# docstring: the generator would make it the description of every subclass's operation.
class HookSchemaView(APIView):
    authentication_classes = [GatewayTokenAuthentication]
    permission_classes: list = []
    parser_classes = [JSONParser]


def schema_only(schema_view: type[APIView]):
    """A Django view that documents a hook path and serves nothing."""
    def view(request):
        return JsonResponse(error_body(
            code="not_found", message="The hook is served by the event-loop application "
            "(config.asgi); this server does not run it."), status=404)

    view.cls, view.initkwargs = schema_view, {}
    view.csrf_exempt = True
    return view


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
        "x-sluice-queued-ms": serializers.CharField(
            required=False, help_text="It waited in the admission queue this long."),
        "x-sluice-queue-eta-ms": serializers.CharField(
            required=False, help_text="Refused up front: the ETA exceeded the wait budget."),
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
    queue_threshold_ms = serializers.IntegerField(
        required=False, help_text="How long the request may wait for capacity in the pool's "
        "admission queue: 0 or 50-20,000 ms (else 400 invalid_queue_threshold). Absent: the "
        "API key's default, else the org's, else 0. The pool's queue_max_wait_ms clamps it.")
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


REFILL_HELP = ("The tokens/s refilling the bucket the x-ratelimit-*-tokens headers describe "
               "(with the headers): per-minute headers read 60 x this.")


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
    tokens_refill_tps = serializers.IntegerField(help_text=REFILL_HELP)
    lease = Lease(required=False, help_text="When asked for (not on dry_run, nor when admitted "
                                            "failing open).")
    dry_run = serializers.BooleanField(required=False)
    queue_budget_ms = serializers.IntegerField(
        required=False, help_text="The wait budget used, where the pool has a queue.")
    queued_ms = serializers.IntegerField(
        required=False, help_text="Admitted after waiting in the queue this long.")
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
    queue_eta_ms = serializers.IntegerField(
        required=False, help_text="Refused up front because this ETA exceeded the wait "
        "budget (retry_after_ms is the same), or refused queue_full.")


class AuthorizeRefused(serializers.Serializer):
    allowed = serializers.BooleanField()
    error = RefusalDetail(help_text=(
        "429: tps_exceeded, daily_quota_exhausted, concurrency_exceeded, "
        "pool_capacity_exhausted. 401: invalid_api_key. 403: org_not_active, "
        "payment_required, no_allocation, spend_cap_reached (the request's worst-case price "
        "does not fit the cap minus month to date minus money held by requests in flight). "
        "409: request_id_conflict. 404: unknown_model. 503: limiter_unavailable. 429 from "
        "the admission queue: queue_timeout, queue_full."))
    headers = RefusalHeaders()
    tokens_refill_tps = serializers.IntegerField(required=False, help_text=REFILL_HELP)
    queue_budget_ms = serializers.IntegerField(
        required=False, help_text="The wait budget used, where the pool has a queue.")
    queued_ms = serializers.IntegerField(
        required=False, help_text="queue_timeout: how long it waited.")


class AuthorizeUnauthorized(AuthorizeRefused):
    """401: an invalid gateway token is answered with the error alone (invalid_gateway_token);
    an invalid API key with a refusal (invalid_api_key)."""

    allowed = serializers.BooleanField(required=False)
    headers = RefusalHeaders(required=False)


class AuthorizeSchema(HookSchemaView):
    @extend_schema(
        operation_id="gateway_authorize", tags=["gateway"],
        summary="Authorize one inference request (one Redis round trip)",
        request=Authorize,
        responses={200: AuthorizeAllowed, 400: Error, 401: AuthorizeUnauthorized,
                   403: AuthorizeRefused, 404: AuthorizeRefused, 409: AuthorizeRefused,
                   413: Error, 429: AuthorizeRefused, 503: AuthorizeRefused},
        examples=[OpenApiExample("request", request_only=True, value={
            "request_id": "req_01HX", "api_key": "sk_0123456789ab_...", "model": "fast-70b",
            "region": "us-east", "input_tokens": 900, "max_output_tokens": 600,
            "service_tier": "auto"})],
    )
    def post(self, request):
        raise NotImplementedError("served by quotas.hook.hook.authorize")


class AuthorizeBatch(serializers.Serializer):
    requests = serializers.ListField(child=Authorize(), min_length=1,
                                     max_length=AUTHORIZE_BATCH_MAX,
                                     help_text=f"1 to {AUTHORIZE_BATCH_MAX} authorize bodies.")
    releases = serializers.DictField(
        required=False, help_text="A POST leases/release body (gateway_process and leases), "
                                  "applied before the requests are decided: the slots it "
                                  "frees are free for them.")


class AuthorizeBatchResult(serializers.Serializer):
    status = serializers.IntegerField(help_text="The HTTP status /authorize answers this "
                                                "request with.")
    body = serializers.DictField(help_text="The body /authorize answers it with (an admission "
                                           "or a refusal, as documented there).")


class AuthorizeBatchResponse(serializers.Serializer):
    results = AuthorizeBatchResult(many=True, help_text="One per request, in their order.")
    releases = AuthorizeBatchResult(required=False, help_text="With `releases`: what POST "
                                                              "leases/release answers them.")


class AuthorizeBatchSchema(HookSchemaView):
    @extend_schema(
        operation_id="gateway_authorize_batch", tags=["gateway"],
        summary="Authorize the requests a gateway has in hand at once, in one call",
        description="Each request is decided as POST /authorize decides it (its own status "
                    "and body, in `results`, in order); the call's HTTP exchange is shared. "
                    "A batch that is not a list of 1 to 100 bodies, or an invalid gateway "
                    "token, is refused whole. A request that may wait in the admission queue "
                    "(queue_threshold_ms) holds the whole answer: send those alone.",
        request=AuthorizeBatch,
        responses={200: AuthorizeBatchResponse, 400: Error, 401: AuthorizeUnauthorized,
                   413: Error},
    )
    def post(self, request):
        raise NotImplementedError("served by quotas.hook.hook.authorize_batch")


class UsageEvent(serializers.Serializer):
    request_id = serializers.RegexField(REQUEST_ID, max_length=128)
    reservation_id = serializers.CharField(
        required=False, help_text="What authorize returned. Lets usage be attributed when "
                                  "Redis no longer holds the reservation (expired, or "
                                  "admitted while failing open); without it such usage is "
                                  "rejected with code unknown_request.")
    input_tokens = serializers.IntegerField(min_value=0, max_value=MAX_TOKENS)
    cached_input_tokens = serializers.IntegerField(
        min_value=0, max_value=MAX_TOKENS, required=False, default=0,
        help_text="Of input_tokens, those the upstream served from its prompt cache (OpenAI: "
                  "usage.prompt_tokens_details.cached_tokens): they use no prefill capacity "
                  "and are billed at the cached input price. At most input_tokens.")
    queued_ms = serializers.IntegerField(
        min_value=0, max_value=MAX_TOKENS, required=False,
        help_text="How long it waited in the admission queue (authorize's queued_ms).")
    output_tokens = serializers.IntegerField(min_value=0, max_value=MAX_TOKENS)
    status = serializers.ChoiceField(choices=USAGE_STATUSES)
    started_at = serializers.DateTimeField()
    first_token_at = serializers.DateTimeField(allow_null=True, required=False)
    finished_at = serializers.DateTimeField()


class UsageBatch(serializers.Serializer):
    events = serializers.ListField(child=UsageEvent(), min_length=1, max_length=MAX_EVENTS,
                                   help_text=f"1 to {MAX_EVENTS} events.")


class UsageResult(serializers.Serializer):
    request_id = serializers.CharField()
    result = serializers.ChoiceField(choices=["recorded", "duplicate", "rejected"])
    error = ErrorDetail(required=False, help_text=(
        "When rejected: unknown_request, invalid_reservation, timestamps_out_of_order, "
        "started_at_out_of_range, finished_at_out_of_range, duration_out_of_range (the window "
        "an event may carry is in docs/hook.md, Accepted timestamps), implausible_usage (more "
        "output tokens than the pool's models produce in the event's duration: docs/hook.md, "
        "Plausible usage)."))


class UsageResponse(serializers.Serializer):
    results = UsageResult(many=True)
    recorded = serializers.IntegerField()
    duplicates = serializers.IntegerField()
    rejected = serializers.IntegerField()


class UsageSchema(HookSchemaView):
    @extend_schema(
        operation_id="gateway_usage", tags=["gateway"],
        summary="Report usage: one event, or {\"events\": [...]} (up to 1,000)",
        description="Every event is durable in PostgreSQL before the answer. Idempotent by "
                    "request_id: a duplicate is acknowledged and never counted twice. A "
                    "malformed body is a 400 and writes nothing.",
        request=PolymorphicProxySerializer(component_name="Usage",
                                           serializers=[UsageEvent, UsageBatch],
                                           resource_type_field_name=None),
        responses={200: UsageResponse, 400: Error, 401: Error, 413: Error, 503: Error},
    )
    def post(self, request):
        raise NotImplementedError("served by metering.api.hook.usage")
