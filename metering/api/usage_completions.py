"""GET /api/v1/orgs/<org_id>/usage/completions: OpenAI's organization Usage API (completions),
for the org's members and its admin keys, plus what only Sluice knows under `sluice`."""

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from metering.usage_report import GROUP_FIELDS, UsageQuery, usage_completions
from orgs.auth import ADMIN_KEY_AUTHENTICATION, ADMIN_KEY_THROTTLES, AdminKeyOrgRoute
from orgs.selectors import org_get_for_principal
from sluice.api import BucketQueryInput, bucket_page_output, validated_input
from sluice.time_buckets import WIDTH_SECONDS, bucket_envelope

_PERCENTILES = inline_serializer("UsagePercentiles", {
    "p50": serializers.FloatField(allow_null=True), "p95": serializers.FloatField(allow_null=True),
})


class UsageCompletionsResultOutput(serializers.Serializer):
    """Documentation only: the view builds plain dicts (metering/usage_report.py)."""

    object = serializers.ChoiceField(choices=["organization.usage.completions.result"])
    input_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    num_model_requests = serializers.IntegerField()
    project_id = serializers.CharField(allow_null=True, help_text="Always null: no projects.")
    user_id = serializers.CharField(allow_null=True, help_text="Always null.")
    batch = serializers.BooleanField(allow_null=True, help_text="Always null: no batch API.")
    api_key_id = serializers.CharField(allow_null=True,
                                       help_text="With group_by=api_key_id: the key's id.")
    model = serializers.CharField(allow_null=True, help_text="With group_by=model.")
    service_tier = serializers.ChoiceField(
        choices=["priority", "default"], allow_null=True,
        help_text="With group_by=service_tier: the pool's tier, fast = priority, "
                  "standard = default.")
    sluice = inline_serializer("UsageCompletionsSluiceFields", {
        "premium_eligible_input_tokens": serializers.IntegerField(),
        "premium_eligible_output_tokens": serializers.IntegerField(),
        "interrupted_requests": serializers.IntegerField(
            help_text="Of num_model_requests, those whose gateway died mid-stream, billed from "
                      "their last progress (status interrupted; docs/hook.md, Leases)."),
        "ttft_ms": _PERCENTILES,
        "output_tokens_per_second": _PERCENTILES,
        "queued_requests": serializers.IntegerField(
            help_text="Requests admitted after waiting in the admission queue."),
        "queued_ms": _PERCENTILES,
        "refusals": serializers.DictField(child=serializers.IntegerField(),
                                          help_text="Refusals by code (authorize's codes)."),
    })


UsageCompletionsPageOutput = bucket_page_output("UsageCompletions",
                                                UsageCompletionsResultOutput(many=True))


class UsageCompletionsApi(APIView):
    authentication_classes = ADMIN_KEY_AUTHENTICATION
    throttle_classes = ADMIN_KEY_THROTTLES

    class UsageCompletionsInput(BucketQueryInput):
        bucket_width = serializers.ChoiceField(choices=sorted(WIDTH_SECONDS), default="1d")
        group_by = serializers.ListField(
            child=serializers.ChoiceField(choices=sorted(GROUP_FIELDS)), required=False)
        api_key_ids = serializers.ListField(child=serializers.IntegerField(min_value=1),
                                            required=False, max_length=100)
        models = serializers.ListField(child=serializers.CharField(max_length=100),
                                       required=False, max_length=100)

    @extend_schema(
        parameters=[UsageCompletionsInput], responses=UsageCompletionsPageOutput,
        operation_id="org_usage_completions",
        description="OpenAI's `GET /v1/organization/usage/completions`, same parameters and "
        "page shape. Members of the org, or its admin key (`Bearer sk_admin_...`). Buckets "
        "are aligned to UTC minutes, hours or days; every bucket of the page is listed. Per "
        "page at most 1,440 `1m`, 168 `1h` or 31 `1d` buckets (defaults 60, 24, 7). Each "
        "result adds `sluice`: premium-eligible tokens, time to first token and output "
        "tokens/s (p50, p95), refusals by code.")
    def get(self, request, org_id: int):
        org = org_get_for_principal(user=request.user, org_id=org_id)
        data = validated_input(self.UsageCompletionsInput, request.query_params)
        query = UsageQuery(org=org, page=data["window"],
                           group_by=tuple(dict.fromkeys(data.get("group_by", []))),
                           api_key_ids=tuple(data.get("api_key_ids", [])),
                           models=tuple(data.get("models", [])))
        return Response(bucket_envelope(data["window"], usage_completions(query=query)))


class OrganizationUsageCompletionsApi(AdminKeyOrgRoute, UsageCompletionsApi):
    @extend_schema(
        parameters=[UsageCompletionsApi.UsageCompletionsInput],
        responses=UsageCompletionsPageOutput, operation_id="organization_usage_completions",
        auth=[{"adminKey": []}],
        description="The same as `/api/v1/orgs/{org_id}/usage/completions` at OpenAI's path: "
        "the organization is the admin key's (`Bearer sk_admin_...`; admin keys only).")
    def get(self, request):
        return super().get(request)
