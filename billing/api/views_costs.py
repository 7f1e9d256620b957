"""GET /api/v1/orgs/<org_id>/costs: OpenAI's organization Costs API, for the org's billing
readers (owners, billing members) and its admin keys. Amounts are billing/costs.py's daily
split of the invoice lines: the days of a closed month add up to its invoice to the cent."""

from collections import defaultdict

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from billing.costs import DayCost, org_daily_costs
from billing.selectors import org_for_billing_reader
from orgs.auth import (
    ADMIN_KEY_AUTHENTICATION,
    ADMIN_KEY_THROTTLES,
    AdminKeyOrgRoute,
)
from sluice.api import BucketQueryInput, bucket_page_output, validated_input
from sluice.errors import NotFound
from sluice.openapi import errors
from sluice.time_buckets import bucket_envelope

CURRENCY = "usd"


class CostsResultOutput(serializers.Serializer):
    """Documentation only: the view builds plain dicts."""

    object = serializers.ChoiceField(choices=["organization.costs.result"])
    amount = inline_serializer("CostsAmount", {
        "value": serializers.FloatField(help_text="Dollars, to the cent."),
        "currency": serializers.CharField(help_text='"usd"'),
    })
    line_item = serializers.CharField(
        allow_null=True, help_text='With group_by=line_item: "<model>, input", "<model>, '
        'output", "<model>, premium", "<model>, speed credit" or "discounts".')
    project_id = serializers.CharField(allow_null=True, help_text="Always null: no projects.")
    quantity = serializers.IntegerField(allow_null=True,
                                        help_text="With group_by=line_item: tokens.")
    quantity_unit = serializers.CharField(allow_null=True)


CostsPageOutput = bucket_page_output("Costs", CostsResultOutput(many=True))


def _results(costs: list[DayCost], *, by_line_item: bool) -> list[dict]:
    groups: dict[str | None, list[int]] = defaultdict(lambda: [0, 0])
    for cost in costs:
        group = groups[cost.line_item if by_line_item else None]
        group[0] += cost.cents
        group[1] += cost.quantity_tokens or 0
    return [{"object": "organization.costs.result",
             "amount": {"value": cents / 100, "currency": CURRENCY},
             "line_item": item, "project_id": None,
             "quantity": tokens if item and tokens else None,
             "quantity_unit": "tokens" if item and tokens else None}
            for item, (cents, tokens) in sorted(groups.items(), key=lambda g: g[0] or "")]


class CostsApi(APIView):
    authentication_classes = ADMIN_KEY_AUTHENTICATION
    throttle_classes = ADMIN_KEY_THROTTLES

    class CostsInput(BucketQueryInput):
        page_limits = (7, 180)  # OpenAI's default and maximum days per page
        bucket_width = serializers.ChoiceField(choices=["1d"], default="1d")
        group_by = serializers.ListField(
            child=serializers.ChoiceField(choices=["line_item", "project_id"]), required=False)

    def org(self, request, org_id: int):
        org = org_for_billing_reader(user=request.user, org_id=org_id)
        if org is None:
            raise NotFound("No such organization.")
        return org

    @extend_schema(
        parameters=[CostsInput], responses=CostsPageOutput, operation_id="org_costs",
        description="OpenAI's `GET /v1/organization/costs`: daily (UTC) buckets, "
        "`group_by=line_item`, amounts as `{value, currency}`. Owners and billing members of "
        "the org, or an admin key whose creator is one (others: 404). A day's amount of an "
        "invoice line is the change of the line's rounded running total, so a closed month's "
        "days add up to its invoice to the cent. At most 180 days per page (default 7).")
    def get(self, request, org_id: int):
        org = self.org(request, org_id)
        data = validated_input(self.CostsInput, request.query_params)
        window = data["window"]
        by_day: dict[int, list[DayCost]] = defaultdict(list)
        for cost in org_daily_costs(org=org, start=window.start, end=window.end):
            by_day[int(window.start.timestamp()) + (cost.day - window.start.date()).days
                   * window.seconds].append(cost)
        by_line_item = "line_item" in data.get("group_by", [])
        return Response(bucket_envelope(window, {
            start: _results(costs, by_line_item=by_line_item) for start, costs in by_day.items()
        }))


class OrganizationCostsApi(AdminKeyOrgRoute, CostsApi):
    @extend_schema(
        parameters=[CostsApi.CostsInput], responses={200: CostsPageOutput, **errors(404)},
        operation_id="organization_costs", auth=[{"adminKey": []}],
        description="The same as `/api/v1/orgs/{org_id}/costs` at OpenAI's path: the "
        "organization is the admin key's (`Bearer sk_admin_...`; admin keys only). A key "
        "whose creator may not see money answers 404, as on the org's path.")
    def get(self, request):
        return super().get(request)
