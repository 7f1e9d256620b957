"""POST /api/gateway/v1/usage: what a gateway reports after each request, recorded by
metering/usage.py. Served with the hook's checks and error answers (the gateway token, POST,
the body limit, the one error shape: quotas/hook/), which this app sits above."""

from django.urls import path
from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema
from prometheus_client import Counter, Histogram
from rest_framework import serializers
from rest_framework.views import APIView

from metering.usage import usage_record
from quotas.hook import schema
from quotas.hook.gateway_tokens import GatewayIdentity
from quotas.hook.hook import Answer, hook_call
from quotas.hook.inputs import MAX_EVENTS, MAX_TOKENS, REQUEST_ID, USAGE_STATUSES, usage_input
from quotas.hook.metrics import LATENCY_BUCKETS
from quotas.hook.views import hook_view
from sluice.errors import error_body
from sluice.openapi import Error, ErrorDetail


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


class UsageSchema(APIView):
    authentication_classes = [schema.GatewayTokenAuthentication]
    permission_classes: list = []
    parser_classes = schema.AuthorizeSchema.parser_classes

    @extend_schema(
        operation_id="gateway_usage", tags=["gateway"],
        summary="Report usage: one event, or {\"events\": [...]} (up to 1,000)",
        description="Every event is durable in PostgreSQL before the answer. Idempotent by "
                    "request_id: a duplicate is acknowledged and never counted twice. A "
                    "malformed body is a 400 and writes nothing.",
        request=PolymorphicProxySerializer(component_name="Usage",
                                           serializers=[UsageEvent, UsageBatch],
                                           resource_type_field_name=None),
        responses={200: UsageResponse, 400: Error, 401: Error},
    )
    def post(self, request):
        raise NotImplementedError("served by usage below")


USAGE_EVENTS = Counter("sluice_usage_events_total", "Usage events by result.", ["result"])
USAGE_SECONDS = Histogram("sluice_usage_seconds", "Usage call handling time in the view.",
                          buckets=LATENCY_BUCKETS)


def usage_handle(body: object, gateway: GatewayIdentity) -> Answer:
    results = usage_record(events=usage_input(body))
    counts = {"recorded": 0, "duplicate": 0, "rejected": 0}
    out = []
    for r in results:
        counts[r.result] += 1
        item = {"request_id": r.request_id, "result": r.result}
        if r.error_code:
            item.update(error_body(code=r.error_code, message=r.error_message))
        out.append(item)
    for result, n in counts.items():
        if n:
            USAGE_EVENTS.labels(result).inc(n)
    return 200, {"results": out, "recorded": counts["recorded"],
                 "duplicates": counts["duplicate"], "rejected": counts["rejected"]}


def usage_call(*, method: str, authorization: str, read_body) -> Answer:
    return hook_call(usage_handle, USAGE_SECONDS, method=method, authorization=authorization,
                     read_body=read_body)


usage = hook_view(usage_call)

urlpatterns = [
    path("usage", schema.documented_by(UsageSchema)(usage), name="usage"),
]
