"""Pools and allocations over REST. Operators manage them; org members read their own
allocations (another org's: 404)."""

from decimal import Decimal

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from orgs.models import Organization
from orgs.selectors import operator_require, user_is_operator
from quotas import services
from quotas.ledger import capacity_conflicts
from quotas.models import (
    LEASE_TTL_DEFAULT_SECONDS,
    LEASE_TTL_SECONDS,
    Allocation,
    AllocationStatus,
    CapacityPool,
    LimiterFailurePolicy,
    Tier,
)
from quotas.selectors import allocation_get_for_user, pool_capacity_summaries, pool_capacity_summary
from sluice.api import break_bookings_field, validated_input
from sluice.errors import NotFound
from sluice.openapi import errors
from sluice.pagination import PaginatedApi, paginate

# A pool's capacities are PostgreSQL integers: larger input is malformed, not a server error.
CAPACITY_TPS_MAX = 2**31 - 1
PREFILL_HELP = ("Input (prefill) tokens/s, metered apart from output; null: input tokens count "
                "with output against capacity_tps.")


LEASE_TTL_HELP = ("Seconds a lease (a reservation its gateway renews by heartbeat) holds its "
                  "slot without one: what a crashed gateway costs in capacity.")


class PoolOutput(serializers.Serializer):
    id = serializers.IntegerField()
    model = serializers.CharField()
    region = serializers.CharField()
    tier = serializers.CharField()
    capacity_tps = serializers.IntegerField(help_text="Decode: output tokens/s.")
    prefill_capacity_tps = serializers.IntegerField(allow_null=True, help_text=PREFILL_HELP)
    guaranteeable_ratio = serializers.DecimalField(max_digits=4, decimal_places=3)
    guaranteeable_tps = serializers.IntegerField()
    limiter_failure_policy = serializers.CharField()
    speed_floor_output_tps = serializers.IntegerField()
    ttft_ceiling_ms = serializers.IntegerField()
    output_estimate_default = serializers.IntegerField(
        help_text="Output tokens a request reserves before its org has history.")
    output_estimate_floor = serializers.IntegerField(
        help_text="The least an output estimate reserves.")
    lease_ttl_seconds = serializers.IntegerField(help_text=LEASE_TTL_HELP)


class PoolSummaryOutput(serializers.Serializer):
    pool_id = serializers.IntegerField()
    name = serializers.CharField()
    capacity_tps = serializers.IntegerField()
    guaranteeable_tps = serializers.IntegerField()
    guaranteed_tps = serializers.IntegerField()
    free_tps = serializers.IntegerField()
    org_count = serializers.IntegerField()
    prefill_capacity_tps = serializers.IntegerField(
        required=False, help_text="Present (with the three below) where the pool meters input "
        "(prefill) tokens/s apart from output.")
    guaranteeable_input_tps = serializers.IntegerField(required=False)
    guaranteed_input_tps = serializers.IntegerField(required=False)
    free_input_tps = serializers.IntegerField(required=False)

    def to_representation(self, summary):
        body = super().to_representation(summary)
        if summary.prefill_capacity_tps is None:
            for name in ("prefill_capacity_tps", "guaranteeable_input_tps",
                         "guaranteed_input_tps", "free_input_tps"):
                body.pop(name)
        return body


def _pool_get(pool_id: int) -> CapacityPool:
    pool = CapacityPool.objects.filter(pk=pool_id).first()
    if pool is None:
        raise NotFound("No such pool.")
    return pool


class PoolListApi(APIView):
    class InputSerializer(serializers.Serializer):
        model = serializers.CharField(max_length=100)
        region = serializers.CharField(max_length=50)
        tier = serializers.ChoiceField(choices=Tier.choices, default=Tier.FAST)
        capacity_tps = serializers.IntegerField(min_value=1, max_value=CAPACITY_TPS_MAX)
        guaranteeable_ratio = serializers.DecimalField(
            max_digits=4, decimal_places=3, min_value=Decimal("0.001"), max_value=Decimal("1"))
        limiter_failure_policy = serializers.ChoiceField(
            choices=LimiterFailurePolicy.choices, required=False)
        prefill_capacity_tps = serializers.IntegerField(min_value=1, max_value=CAPACITY_TPS_MAX,
                                                        required=False,
                                                        allow_null=True, help_text=PREFILL_HELP)
        output_estimate_default = serializers.IntegerField(min_value=1, required=False)
        output_estimate_floor = serializers.IntegerField(min_value=0, required=False)
        lease_ttl_seconds = serializers.IntegerField(
            min_value=LEASE_TTL_SECONDS[0], max_value=LEASE_TTL_SECONDS[1], required=False,
            help_text=LEASE_TTL_HELP + f" Default {LEASE_TTL_DEFAULT_SECONDS}.")

    @extend_schema(responses=PoolSummaryOutput(many=True),
                   description="Every pool with its capacity summary (operators).")
    def get(self, request):
        operator_require(user=request.user, perm="quotas.view_capacitypool")
        return Response(PoolSummaryOutput(pool_capacity_summaries(), many=True).data)

    @extend_schema(request=InputSerializer, responses={201: PoolOutput})
    def post(self, request):
        operator_require(user=request.user, perm="quotas.add_capacitypool")
        data = validated_input(self.InputSerializer, request.data)
        pool = services.pool_create(actor=request.user, **data)
        return Response(PoolOutput(pool).data, status=status.HTTP_201_CREATED)


class PoolDetailApi(APIView):
    @extend_schema(responses=PoolSummaryOutput)
    def get(self, request, pool_id: int):
        operator_require(user=request.user, perm="quotas.view_capacitypool")
        return Response(PoolSummaryOutput(pool_capacity_summary(pool=_pool_get(pool_id))).data)


class PoolCapacityApi(APIView):
    class InputSerializer(serializers.Serializer):
        capacity_tps = serializers.IntegerField(min_value=1, max_value=CAPACITY_TPS_MAX)
        guaranteeable_ratio = serializers.DecimalField(
            max_digits=4, decimal_places=3, min_value=Decimal("0.001"), max_value=Decimal("1"),
            required=False)
        prefill_capacity_tps = serializers.IntegerField(
            min_value=1, max_value=CAPACITY_TPS_MAX, required=False, allow_null=True,
            help_text=PREFILL_HELP + " Absent: unchanged. Declaring it gives the pool's "
            "allocations input TPS in proportion to their output TPS.")
        reason = serializers.CharField(max_length=2000, required=False, default="")
        break_bookings = break_bookings_field(
            "Bookings this change breaks, cancelled with a full refund and a notice: the "
            "conflicts a lower capacity answered.")

    @extend_schema(request=InputSerializer, responses={200: PoolSummaryOutput, **errors(422)},
                   description="Change capacity. Lowering it below what is guaranteed answers "
                   "422 `capacity_below_guarantees` with the excess (`details.limit` is "
                   "`input` for the prefill capacity); below what confirmed bookings need at "
                   "some instant, 422 `capacity_below_bookings` with `details.conflicts` (the "
                   "booking ids) unless `break_bookings` names bookings whose cancellation "
                   "leaves the others room (a booking it does not break: 400 "
                   "`booking_not_in_conflict`).")
    def post(self, request, pool_id: int):
        operator_require(user=request.user, perm="quotas.change_capacitypool")
        pool = _pool_get(pool_id)
        data = validated_input(self.InputSerializer, request.data)
        pool = services.pool_capacity_set(pool=pool, actor=request.user, **data)
        return Response(PoolSummaryOutput(pool_capacity_summary(pool=pool)).data)


class ConflictOutput(serializers.Serializer):
    id = serializers.IntegerField()
    org = serializers.IntegerField(source="org_id")
    org_name = serializers.CharField(source="org.name")
    starts_at = serializers.DateTimeField()
    ends_at = serializers.DateTimeField()
    output_tps = serializers.IntegerField()
    input_tps = serializers.IntegerField()


class CapacityConflictsOutput(serializers.Serializer):
    conflicts = ConflictOutput(many=True, source="bookings")
    excess_tps = serializers.IntegerField()
    excess_input_tps = serializers.IntegerField()


class PoolCapacityConflictsApi(APIView):
    class FilterSerializer(serializers.Serializer):
        capacity_tps = serializers.IntegerField(min_value=1, max_value=CAPACITY_TPS_MAX)
        guaranteeable_ratio = serializers.DecimalField(
            max_digits=4, decimal_places=3, min_value=Decimal("0.001"), max_value=Decimal("1"),
            required=False)
        prefill_capacity_tps = serializers.IntegerField(min_value=1, max_value=CAPACITY_TPS_MAX,
                                                        required=False)

    @extend_schema(parameters=[FilterSerializer], responses=CapacityConflictsOutput,
                   description="The confirmed bookings a capacity would break (none: it "
                   "holds them all), before changing anything.")
    def get(self, request, pool_id: int):
        operator_require(user=request.user, perm="quotas.view_capacitypool")
        pool = _pool_get(pool_id)
        data = validated_input(self.FilterSerializer, request.query_params)
        ratio = data.get("guaranteeable_ratio", pool.guaranteeable_ratio)
        prefill = data.get("prefill_capacity_tps", pool.prefill_capacity_tps)
        found = capacity_conflicts(
            pool=pool, guaranteeable_tps=CapacityPool.guaranteeable_for(data["capacity_tps"],
                                                                        ratio),
            guaranteeable_input_tps=None if prefill is None
            else CapacityPool.guaranteeable_for(prefill, ratio))
        return Response(CapacityConflictsOutput(found).data)


class AllocationOutput(serializers.Serializer):
    id = serializers.IntegerField()
    org = serializers.IntegerField(source="org_id")
    pool = serializers.IntegerField(source="pool_id")
    guaranteed_tps = serializers.IntegerField()
    burst_tps = serializers.IntegerField()
    guaranteed_input_tps = serializers.IntegerField(
        allow_null=True, help_text="Set where the pool meters input apart.")
    burst_input_tps = serializers.IntegerField(allow_null=True)
    daily_tokens = serializers.IntegerField()
    max_concurrency = serializers.IntegerField()
    status = serializers.CharField()
    valid_from = serializers.DateTimeField()
    valid_until = serializers.DateTimeField(allow_null=True)


class _LimitsInput(serializers.Serializer):
    guaranteed_tps = serializers.IntegerField(min_value=1)
    burst_tps = serializers.IntegerField(min_value=1)
    guaranteed_input_tps = serializers.IntegerField(
        min_value=1, required=False, help_text="Only where the pool meters input apart; "
        "absent there: in proportion to guaranteed_tps (prefill / decode capacity).")
    burst_input_tps = serializers.IntegerField(min_value=1, required=False)
    daily_tokens = serializers.IntegerField(min_value=1)
    max_concurrency = serializers.IntegerField(min_value=1, max_value=100_000)
    valid_until = serializers.DateTimeField(required=False, allow_null=True)
    reason = serializers.CharField(max_length=2000, required=False, default="")

    def validate(self, attrs):
        for low, high in (("guaranteed_tps", "burst_tps"),
                          ("guaranteed_input_tps", "burst_input_tps")):
            g, b = attrs.get(low), attrs.get(high)
            if g is not None and b is not None and b < g:
                raise serializers.ValidationError({high: [f"Must be at least {low}."]})
        return attrs


class AllocationListApi(PaginatedApi, APIView):
    class FilterSerializer(serializers.Serializer):
        org = serializers.IntegerField(required=False)
        pool = serializers.IntegerField(required=False)
        status = serializers.ChoiceField(choices=AllocationStatus.choices, required=False)

    class InputSerializer(_LimitsInput):
        org = serializers.PrimaryKeyRelatedField(queryset=Organization.objects.all())
        pool = serializers.PrimaryKeyRelatedField(queryset=CapacityPool.objects.all())

    @extend_schema(parameters=[FilterSerializer], responses=AllocationOutput(many=True),
                   description="Operators see every allocation; members see their orgs' only.")
    def get(self, request):
        filters = validated_input(self.FilterSerializer, request.query_params)
        allocations = Allocation.objects.order_by("pk")
        if not user_is_operator(request.user):
            allocations = allocations.filter(org__memberships__user=request.user)
        for field, value in filters.items():
            allocations = allocations.filter(**{field: value})
        return paginate(request, self, allocations, AllocationOutput)

    @extend_schema(request=InputSerializer, responses={201: AllocationOutput,
                                                       **errors(409, 422)},
                   description="Grant an allocation. If the pool cannot guarantee it, answers "
                   "422 `capacity_exhausted` with `details.free_tps`.")
    def post(self, request):
        operator_require(user=request.user, perm="quotas.add_allocation")
        data = validated_input(self.InputSerializer, request.data)
        allocation = services.allocation_grant(actor=request.user, **data)
        return Response(AllocationOutput(allocation).data, status=status.HTTP_201_CREATED)


class AllocationDetailApi(APIView):
    class InputSerializer(_LimitsInput):
        break_bookings = break_bookings_field(
            "With a sooner `valid_until`: every booking of the org in the pool that would end "
            "after it, cancelled with a full refund and a notice.")

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            for field in self.fields.values():
                field.required = False

    @extend_schema(responses=AllocationOutput)
    def get(self, request, allocation_id: int):
        allocation = allocation_get_for_user(user=request.user, allocation_id=allocation_id)
        return Response(AllocationOutput(allocation).data)

    @extend_schema(request=InputSerializer, responses={200: AllocationOutput,
                                                       **errors(409, 422)},
                   description="Change an allocation. A `valid_until` sooner than a confirmed "
                   "booking of the org in the pool ends answers 422 "
                   "`allocation_ends_before_bookings` with `details.conflicts` unless "
                   "`break_bookings` names every one of them.")
    def patch(self, request, allocation_id: int):
        allocation = allocation_get_for_user(user=request.user, allocation_id=allocation_id)
        operator_require(user=request.user, perm="quotas.change_allocation")
        data = validated_input(self.InputSerializer, request.data)
        allocation = services.allocation_change(allocation=allocation, actor=request.user,
                                                **data)
        return Response(AllocationOutput(allocation).data)


class AllocationEndApi(APIView):
    class InputSerializer(serializers.Serializer):
        reason = serializers.CharField(max_length=2000, required=False, default="")
        break_bookings = break_bookings_field(
            "Every booking of the org in the pool that has not ended: cancelled with a full "
            "refund and a notice.")

    @extend_schema(request=InputSerializer, responses={200: AllocationOutput,
                                                       **errors(409, 422)},
                   description="End an allocation. While bookings of the org in the pool have "
                   "not ended: 422 `allocation_has_bookings` with `details.conflicts` unless "
                   "`break_bookings` names every one of them.")
    def post(self, request, allocation_id: int):
        allocation = allocation_get_for_user(user=request.user, allocation_id=allocation_id)
        operator_require(user=request.user, perm="quotas.change_allocation")
        data = validated_input(self.InputSerializer, request.data)
        allocation = services.allocation_end(allocation=allocation, actor=request.user,
                                             **data)
        return Response(AllocationOutput(allocation).data)
