"""Rollout waves over REST, for operators: create, list, plan, open, close; and a pool's
auto-admission switch. Included by config/urls.py under api/v1/."""

from django.urls import path
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from orgs.permissions import operator_access
from quotas.models import CapacityPool
from quotas.selectors import pool_get
from rollout.models import RolloutWave, WaveState
from rollout.waves import pool_auto_admit_set, wave_close, wave_create, wave_open, wave_plan
from sluice.api import RequiredBooleanField, validated_input
from sluice.errors import NotFound
from sluice.openapi import errors


class WaveOutput(serializers.ModelSerializer):
    class Meta:
        model = RolloutWave
        fields = ["id", "pool", "name", "opens_at", "closes_at", "capacity_tps", "max_orgs",
                  "guaranteed_tps", "burst_tps", "daily_tokens", "max_concurrency", "state",
                  "opened_at", "closed_at", "admitted_count", "created_at"]


class PlannedOrgOutput(serializers.Serializer):
    org = serializers.IntegerField(source="application.org_id")
    name = serializers.CharField(source="application.org.name")
    application = serializers.IntegerField(source="application.pk")
    position = serializers.IntegerField()
    score = serializers.IntegerField(source="breakdown.score")
    use_case = serializers.CharField(source="application.use_case")
    expected_peak_tps = serializers.IntegerField(source="application.expected_peak_tps")


class WavePlanOutput(serializers.Serializer):
    wave = WaveOutput()
    admitted = PlannedOrgOutput(many=True)
    capacity_tps_before = serializers.IntegerField()
    capacity_tps_after = serializers.IntegerField()
    guaranteeable_tps_after = serializers.IntegerField()
    guaranteed_tps_before = serializers.IntegerField()
    guaranteed_tps_after = serializers.IntegerField()
    booked_peak_tps = serializers.IntegerField(
        help_text="Confirmed bookings at their busiest instant to come: the wave admits only "
        "into what they and the allocations leave free.")
    guaranteed_utilization = serializers.FloatField()
    projected_tps = serializers.FloatField()
    projected_utilization = serializers.FloatField()
    projection_uses_observed_usage = serializers.BooleanField()
    free_tps_after = serializers.IntegerField()
    queued_after = serializers.IntegerField()
    queued_after_expected_tps = serializers.IntegerField()


def _wave(pk: int) -> RolloutWave:
    wave = RolloutWave.objects.select_related("pool").filter(pk=pk).first()
    if wave is None:
        raise NotFound("No such wave.")
    return wave


class WaveListApi(APIView):
    permission_classes = [operator_access("rollout.change_rolloutwave")]

    class WaveFilter(serializers.Serializer):
        pool = serializers.IntegerField(min_value=1, required=False)
        state = serializers.ChoiceField(choices=WaveState.choices, required=False)

    class WaveCreateInput(serializers.Serializer):
        pool = serializers.PrimaryKeyRelatedField(queryset=CapacityPool.objects.all())
        name = serializers.CharField(max_length=200)
        opens_at = serializers.DateTimeField()
        closes_at = serializers.DateTimeField(required=False, allow_null=True, default=None)
        capacity_tps = serializers.IntegerField(min_value=0, max_value=10_000_000)
        max_orgs = serializers.IntegerField(min_value=1, max_value=100_000)
        guaranteed_tps = serializers.IntegerField(min_value=1, max_value=10_000_000)
        burst_tps = serializers.IntegerField(min_value=1, max_value=10_000_000)
        daily_tokens = serializers.IntegerField(min_value=1, max_value=10**15)
        max_concurrency = serializers.IntegerField(min_value=1, max_value=100_000)

    @extend_schema(parameters=[WaveFilter], responses=WaveOutput(many=True))
    def get(self, request):
        filters = validated_input(self.WaveFilter, request.query_params)
        waves = RolloutWave.objects.filter(**filters).order_by("opens_at", "id")
        return Response(WaveOutput(waves, many=True).data)

    @extend_schema(request=WaveCreateInput, responses={201: WaveOutput, **errors(409, 422)})
    def post(self, request):
        data = validated_input(self.WaveCreateInput, request.data)
        wave = wave_create(actor=request.user, **data)
        return Response(WaveOutput(wave).data, status=status.HTTP_201_CREATED)


class WaveDetailApi(APIView):
    permission_classes = [operator_access("rollout.change_rolloutwave")]

    @extend_schema(responses=WaveOutput)
    def get(self, request, pk: int):
        return Response(WaveOutput(_wave(pk)).data)


class WavePlanApi(APIView):
    permission_classes = [operator_access("rollout.change_rolloutwave")]

    @extend_schema(responses={200: WavePlanOutput, **errors(409)})
    def get(self, request, pk: int):
        return Response(WavePlanOutput(wave_plan(wave=_wave(pk))).data)


class WaveOpenApi(APIView):
    permission_classes = [operator_access("rollout.change_rolloutwave")]

    @extend_schema(request=None, responses={200: WaveOutput, **errors(409, 422)})
    def post(self, request, pk: int):
        return Response(WaveOutput(wave_open(wave=_wave(pk), actor=request.user)).data)


class WaveCloseApi(APIView):
    permission_classes = [operator_access("rollout.change_rolloutwave")]

    class WaveCloseInput(serializers.Serializer):
        reason = serializers.CharField(max_length=5_000, required=False, default="",
                                       allow_blank=True)

    @extend_schema(request=WaveCloseInput, responses={200: WaveOutput, **errors(409)})
    def post(self, request, pk: int):
        data = validated_input(self.WaveCloseInput, request.data)
        wave = wave_close(wave=_wave(pk), actor=request.user, reason=data["reason"])
        return Response(WaveOutput(wave).data)


class PoolAutoAdmissionApi(APIView):
    permission_classes = [operator_access("quotas.change_capacitypool")]

    class PoolAutoAdmissionInput(serializers.Serializer):
        auto_admit = RequiredBooleanField()

    @extend_schema(request=PoolAutoAdmissionInput, responses=PoolAutoAdmissionInput)
    def put(self, request, pk: int):
        data = validated_input(self.PoolAutoAdmissionInput, request.data)
        row = pool_auto_admit_set(pool=pool_get(pool_id=pk), enabled=data["auto_admit"],
                                  actor=request.user)
        return Response({"auto_admit": row.auto_admit})



urlpatterns = [
    path("operator/waves", WaveListApi.as_view(), name="operator-waves"),
    path("operator/waves/<int:pk>", WaveDetailApi.as_view(), name="operator-wave"),
    path("operator/waves/<int:pk>/plan", WavePlanApi.as_view(), name="operator-wave-plan"),
    path("operator/waves/<int:pk>/open", WaveOpenApi.as_view(), name="operator-wave-open"),
    path("operator/waves/<int:pk>/close", WaveCloseApi.as_view(), name="operator-wave-close"),
    path("operator/pools/<int:pk>/auto-admission", PoolAutoAdmissionApi.as_view(),
         name="operator-pool-auto-admission"),
]
