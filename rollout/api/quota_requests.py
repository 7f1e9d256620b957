"""Quota-increase requests over REST: orgs ask and follow their requests; operators decide."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from orgs.models import MEMBER_MANAGERS
from orgs.selectors import operator_require, org_get_for_user, org_require_role
from quotas.models import CapacityPool
from quotas.selectors import pool_get
from rollout import quota_requests as services
from rollout.models import (
    QUOTA_REQUEST_CONCURRENCY_MAX,
    QUOTA_REQUEST_DAILY_TOKENS_MAX,
    QUOTA_REQUEST_TPS_MAX,
    PoolAdmission,
    QuotaRequest,
    QuotaRequestStatus,
)
from rollout.selectors import org_quota_request_get, org_quota_requests
from sluice.api import validated_input
from sluice.errors import NotFound
from sluice.openapi import errors
from sluice.pagination import PaginatedApi, paginate


class QuotaRequestOutput(serializers.Serializer):
    id = serializers.IntegerField()
    org = serializers.IntegerField(source="org_id")
    pool = serializers.IntegerField(source="pool_id")
    guaranteed_tps = serializers.IntegerField()
    burst_tps = serializers.IntegerField()
    daily_tokens = serializers.IntegerField()
    max_concurrency = serializers.IntegerField()
    reason = serializers.CharField()
    status = serializers.ChoiceField(choices=QuotaRequestStatus.choices)
    decided_by = serializers.CharField()
    decision_reason = serializers.CharField()
    decided_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()


def _org_request(request, org_id: int, request_id: int):
    org = org_get_for_user(user=request.user, org_id=org_id)
    return org, org_quota_request_get(org=org, request_id=request_id)


class OrgQuotaRequestListApi(PaginatedApi, APIView):
    class InputSerializer(serializers.Serializer):
        pool = serializers.PrimaryKeyRelatedField(queryset=CapacityPool.objects.all())
        guaranteed_tps = serializers.IntegerField(min_value=1, max_value=QUOTA_REQUEST_TPS_MAX)
        burst_tps = serializers.IntegerField(min_value=1, max_value=QUOTA_REQUEST_TPS_MAX)
        daily_tokens = serializers.IntegerField(min_value=1,
                                                max_value=QUOTA_REQUEST_DAILY_TOKENS_MAX)
        max_concurrency = serializers.IntegerField(min_value=1,
                                                   max_value=QUOTA_REQUEST_CONCURRENCY_MAX)
        reason = serializers.CharField(max_length=4000)

        def validate(self, attrs):
            if attrs["burst_tps"] < attrs["guaranteed_tps"]:
                raise serializers.ValidationError(
                    {"burst_tps": ["Must be at least guaranteed_tps."]})
            return attrs

    @extend_schema(responses=QuotaRequestOutput(many=True))
    def get(self, request, org_id: int):
        org = org_get_for_user(user=request.user, org_id=org_id)
        return paginate(request, self, org_quota_requests(org=org), QuotaRequestOutput)

    @extend_schema(request=InputSerializer, responses={201: QuotaRequestOutput,
                                                       **errors(409, 422)},
                   description="Ask for new limits in a pool (the full limits wanted, not a "
                   "delta). One pending request per pool. Approved at once only where the org "
                   "already holds an allocation in the pool, the pool's auto-approval rules "
                   "bound the growth of every dimension (counting the org's requests "
                   "auto-approved there within the rules' window) and the pool has the room.")
    def post(self, request, org_id: int):
        org = org_get_for_user(user=request.user, org_id=org_id)
        org_require_role(user=request.user, org=org, roles=MEMBER_MANAGERS,
                         perm="rollout.add_quotarequest")
        data = validated_input(self.InputSerializer, request.data)
        created = services.quota_request_create(org=org, actor=request.user, **data)
        return Response(QuotaRequestOutput(created).data, status=status.HTTP_201_CREATED)


class OrgQuotaRequestCancelApi(APIView):
    @extend_schema(request=None, responses={200: QuotaRequestOutput, **errors(409)})
    def post(self, request, org_id: int, request_id: int):
        org, quota_request = _org_request(request, org_id, request_id)
        org_require_role(user=request.user, org=org, roles=MEMBER_MANAGERS,
                         perm="rollout.change_quotarequest")
        cancelled = services.quota_request_cancel(request=quota_request, actor=request.user)
        return Response(QuotaRequestOutput(cancelled).data)


class OperatorQuotaRequestListApi(PaginatedApi, APIView):
    class FilterSerializer(serializers.Serializer):
        status = serializers.ChoiceField(choices=QuotaRequestStatus.choices, required=False)
        pool = serializers.IntegerField(required=False)

    @extend_schema(parameters=[FilterSerializer], responses=QuotaRequestOutput(many=True),
                   description="The operators' inbox, oldest pending first.")
    def get(self, request):
        operator_require(user=request.user, perm="rollout.view_quotarequest")
        filters = validated_input(self.FilterSerializer, request.query_params)
        requests = QuotaRequest.objects.filter(**filters).order_by("created_at", "id")
        return paginate(request, self, requests, QuotaRequestOutput)


def _operator_request(request, request_id: int) -> QuotaRequest:
    operator_require(user=request.user, perm="rollout.change_quotarequest")
    quota_request = QuotaRequest.objects.filter(pk=request_id).first()
    if quota_request is None:
        raise NotFound("No such quota request.")
    return quota_request


class QuotaRequestDecisionInput(serializers.Serializer):
    reason = serializers.CharField(max_length=4000, required=False, default="")


class OperatorQuotaRequestApproveApi(APIView):
    @extend_schema(request=QuotaRequestDecisionInput,
                   responses={200: QuotaRequestOutput, **errors(409, 422)},
                   description="Applies the limits with the capacity check: 422 "
                   "`capacity_exhausted` (the request stays pending) if the pool can't.")
    def post(self, request, request_id: int):
        quota_request = _operator_request(request, request_id)
        data = validated_input(QuotaRequestDecisionInput, request.data)
        approved = services.quota_request_approve(request=quota_request, actor=request.user,
                                                  reason=data["reason"])
        return Response(QuotaRequestOutput(approved).data)


class OperatorQuotaRequestDenyApi(APIView):
    class InputSerializer(serializers.Serializer):
        reason = serializers.CharField(max_length=4000)

    @extend_schema(request=InputSerializer, responses={200: QuotaRequestOutput, **errors(409)})
    def post(self, request, request_id: int):
        quota_request = _operator_request(request, request_id)
        data = validated_input(self.InputSerializer, request.data)
        denied = services.quota_request_deny(request=quota_request, actor=request.user,
                                             reason=data["reason"])
        return Response(QuotaRequestOutput(denied).data)


class PoolQuotaAutoApprovalApi(APIView):
    """The rules that let a pool approve quota requests without an operator."""

    class Rules(serializers.Serializer):
        quota_auto_approve_max_tps = serializers.IntegerField(
            min_value=0, max_value=QUOTA_REQUEST_TPS_MAX,
            help_text="Most guaranteed tokens/s an org's allocation may grow by in the window.")
        quota_auto_approve_max_burst_tps = serializers.IntegerField(
            min_value=0, max_value=QUOTA_REQUEST_TPS_MAX)
        quota_auto_approve_max_daily_tokens = serializers.IntegerField(
            min_value=0, max_value=QUOTA_REQUEST_DAILY_TOKENS_MAX)
        quota_auto_approve_max_concurrency = serializers.IntegerField(
            min_value=0, max_value=QUOTA_REQUEST_CONCURRENCY_MAX)
        quota_auto_approve_window_days = serializers.IntegerField(min_value=1, max_value=366)

    @extend_schema(responses=Rules)
    def get(self, request, pool_id: int):
        operator_require(user=request.user, perm="quotas.view_capacitypool")
        pool = pool_get(pool_id=pool_id)
        row = PoolAdmission.objects.filter(pool=pool).first() or PoolAdmission(pool=pool)
        return Response(self.Rules(row).data)

    @extend_schema(request=Rules, responses={200: Rules},
                   description="Set every rule at once. A dimension whose rule is 0 may not "
                   "grow without an operator; all at 0 turns auto-approval off.")
    def put(self, request, pool_id: int):
        operator_require(user=request.user, perm="rollout.change_pooladmission")
        data = validated_input(self.Rules, request.data)
        row = services.pool_quota_auto_approval_set(pool=pool_get(pool_id=pool_id), rules=data,
                                                    actor=request.user)
        return Response(self.Rules(row).data)
