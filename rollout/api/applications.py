"""Waitlist applications over REST.

Operators (staff) under /api/v1/operator/applications: the queue with filters, detail, checklist,
reviewer, notes, decisions (one or in bulk), pool and score override.
Organizations under /api/v1/org/<slug>/: apply, read and correct their own application, read
their waitlist position. The org comes from the caller's membership: another org's slug or
application id is a 404, exactly like one that does not exist.
"""

from django.contrib.auth import get_user_model
from django.urls import path
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from orgs.models import MEMBER_MANAGERS, Membership
from orgs.permissions import operator_access
from quotas.models import CapacityPool
from quotas.selectors import pool_regions
from rollout.applications import (
    APPLICANT_FIELDS,
    application_check_set,
    application_decide,
    application_note_add,
    application_reviewer_assign,
    application_score_override,
    application_submit,
    application_update,
    applications_decide_bulk,
    org_pool_preference_set,
)
from rollout.models import (
    Application,
    ApplicationState,
    CheckItem,
    Decision,
    LatencySensitivity,
    UseCase,
)
from rollout.waitlist import application_rows, org_waitlist_estimate, vetting_queue
from sluice.api import RequiredBooleanField, validated_input
from sluice.errors import NotFound, PermissionDenied
from sluice.openapi import errors
from sluice.pagination import PaginatedApi, paginate

# --- Serializers shared by both audiences ------------------------------------------------------


class ApplicationInput(serializers.Serializer):
    legal_name = serializers.CharField(max_length=200)
    website = serializers.URLField(max_length=300)
    country = serializers.RegexField(r"^[A-Z]{2}$", error_messages={
        "invalid": "Use an ISO 3166-1 alpha-2 code, like DE."})
    contact_name = serializers.CharField(max_length=200)
    contact_email = serializers.EmailField()
    use_case = serializers.ChoiceField(choices=UseCase.choices)
    use_case_description = serializers.CharField(max_length=5_000)
    expected_peak_tps = serializers.IntegerField(min_value=1, max_value=10_000_000)
    expected_daily_tokens = serializers.IntegerField(min_value=1, max_value=10**15)
    latency_sensitivity = serializers.ChoiceField(choices=LatencySensitivity.choices)
    preferred_region = serializers.CharField(max_length=50)

    def validate_preferred_region(self, value: str) -> str:
        """A region some pool serves (as the portal's form offers), or the one the application
        already has (`current_region` in the context: an earlier answer stays valid when its
        pool goes)."""
        current = self.context.get("current_region")
        regions = pool_regions()
        if value != current and value not in regions:
            raise serializers.ValidationError(
                f"No pool serves {value!r}; choose one of: {', '.join(regions) or '(none yet)'}.")
        return value


class ScoreOutput(serializers.Serializer):
    score = serializers.IntegerField()
    computed = serializers.IntegerField()
    override = serializers.IntegerField(allow_null=True)
    override_reason = serializers.CharField()
    use_case_points = serializers.IntegerField()
    latency_points = serializers.IntegerField()
    demand_fit_points = serializers.IntegerField()
    expected_peak_tps = serializers.IntegerField()
    reference_tps = serializers.IntegerField()


class EstimateOutput(serializers.Serializer):
    pool = serializers.IntegerField(source="pool.pk")
    position = serializers.IntegerField()
    queue_length = serializers.IntegerField()
    wave = serializers.CharField(source="wave.name", allow_null=True, default=None)
    opens_at = serializers.DateTimeField(source="wave.opens_at", allow_null=True, default=None)
    label = serializers.CharField()


class OrgApplicationOutput(serializers.ModelSerializer):
    """What the org sees: its answers, the state and the reason an operator chose to share."""

    class Meta:
        model = Application
        fields = ["id", "state", *APPLICANT_FIELDS, "submitted_at", "shared_reason",
                  "decided_at"]


class OperatorApplicationOutput(serializers.ModelSerializer):
    org = inline_serializer("ApplicationOrg", fields={
        "id": serializers.IntegerField(), "name": serializers.CharField(),
        "slug": serializers.CharField(), "status": serializers.CharField()})
    pool = serializers.IntegerField(source="org.pool_preference.pool_id", default=None,
                                    allow_null=True)
    score = ScoreOutput()
    position = serializers.IntegerField(allow_null=True)

    class Meta:
        model = Application
        fields = ["id", "org", "state", *APPLICANT_FIELDS, "submitted_at", "pool", "score",
                  "position", "reviewer", "decision", "decision_reason", "shared_reason",
                  "decided_by", "decided_at"]


class CheckOutput(serializers.Serializer):
    item = serializers.CharField()
    done = serializers.BooleanField()
    done_by = serializers.CharField(source="done_by_label")
    done_at = serializers.DateTimeField(allow_null=True)
    note = serializers.CharField()


class NoteOutput(serializers.Serializer):
    id = serializers.IntegerField()
    author = serializers.CharField(source="author.get_username", default=None)
    body = serializers.CharField()
    created_at = serializers.DateTimeField()


class OperatorApplicationDetailOutput(OperatorApplicationOutput):
    checklist = CheckOutput(many=True, source="checks.all")
    notes = NoteOutput(many=True, source="notes.all")

    class Meta(OperatorApplicationOutput.Meta):
        fields = [*OperatorApplicationOutput.Meta.fields, "checklist", "notes"]


# --- Operator views ----------------------------------------------------------------------------


def _operator_queryset():
    return Application.objects.select_related("org__pool_preference__pool")


def _operator_application(pk: int) -> Application:
    app = (_operator_queryset().prefetch_related("checks", "notes__author")
           .filter(pk=pk).first())
    if app is None:
        raise NotFound("No such application.")
    return application_rows([app])[0]


def _detail_response(pk: int, status_code: int = status.HTTP_200_OK) -> Response:
    return Response(OperatorApplicationDetailOutput(_operator_application(pk)).data,
                    status=status_code)


class OperatorApplicationListApi(PaginatedApi, APIView):
    """The vetting queue. Scores depend on pools and scheduled waves, so they are computed in
    Python (a fixed number of queries) and the score filter applies before pagination."""

    permission_classes = [operator_access("rollout.change_application")]

    class ApplicationFilter(serializers.Serializer):
        state = serializers.ChoiceField(choices=ApplicationState.choices, required=False)
        use_case = serializers.ChoiceField(choices=UseCase.choices, required=False)
        pool = serializers.IntegerField(min_value=1, required=False)
        min_score = serializers.IntegerField(required=False)
        max_score = serializers.IntegerField(required=False)

    @extend_schema(parameters=[ApplicationFilter], responses=OperatorApplicationOutput(many=True))
    def get(self, request):
        f = validated_input(self.ApplicationFilter, request.query_params)
        rows = vetting_queue(state=f.get("state", ""), use_case=f.get("use_case", ""),
                             pool_id=f.get("pool"), min_score=f.get("min_score"),
                             max_score=f.get("max_score"))
        return paginate(request, self, rows, OperatorApplicationOutput)


class OperatorApplicationDetailApi(APIView):
    permission_classes = [operator_access("rollout.change_application")]

    @extend_schema(responses=OperatorApplicationDetailOutput)
    def get(self, request, pk: int):
        return _detail_response(pk)


def _app_or_404(pk: int) -> Application:
    app = Application.objects.select_related("org").filter(pk=pk).first()
    if app is None:
        raise NotFound("No such application.")
    return app


class OperatorApplicationCheckApi(APIView):
    permission_classes = [operator_access("rollout.change_application")]

    class ApplicationCheckInput(serializers.Serializer):
        item = serializers.ChoiceField(choices=CheckItem.choices)
        done = RequiredBooleanField()
        note = serializers.CharField(required=False, default="", allow_blank=True)

    @extend_schema(request=ApplicationCheckInput,
                   responses={200: OperatorApplicationDetailOutput, **errors(409)})
    def post(self, request, pk: int):
        data = validated_input(self.ApplicationCheckInput, request.data)
        application_check_set(application=_app_or_404(pk), actor=request.user, **data)
        return _detail_response(pk)


class OperatorApplicationReviewerApi(APIView):
    permission_classes = [operator_access("rollout.change_application")]

    class ApplicationReviewerInput(serializers.Serializer):
        reviewer = serializers.PrimaryKeyRelatedField(queryset=get_user_model().objects.all())

    @extend_schema(request=ApplicationReviewerInput,
                   responses={200: OperatorApplicationDetailOutput, **errors(409, 422)})
    def post(self, request, pk: int):
        data = validated_input(self.ApplicationReviewerInput, request.data)
        application_reviewer_assign(application=_app_or_404(pk), reviewer=data["reviewer"],
                                    actor=request.user)
        return _detail_response(pk)


class OperatorApplicationNoteApi(APIView):
    permission_classes = [operator_access("rollout.change_application")]

    class ApplicationNoteInput(serializers.Serializer):
        body = serializers.CharField(max_length=10_000)

    @extend_schema(request=ApplicationNoteInput, responses={201: OperatorApplicationDetailOutput})
    def post(self, request, pk: int):
        data = validated_input(self.ApplicationNoteInput, request.data)
        application_note_add(application=_app_or_404(pk), body=data["body"], actor=request.user)
        return _detail_response(pk, status.HTTP_201_CREATED)


class OperatorApplicationDecisionApi(APIView):
    permission_classes = [operator_access("rollout.change_application")]

    class ApplicationDecisionInput(serializers.Serializer):
        decision = serializers.ChoiceField(choices=Decision.choices)
        reason = serializers.CharField(max_length=5_000)
        shared_reason = serializers.CharField(max_length=5_000, required=False, default="",
                                              allow_blank=True)
        pool = serializers.PrimaryKeyRelatedField(queryset=CapacityPool.objects.all(),
                                                  required=False, default=None)

    @extend_schema(request=ApplicationDecisionInput,
                   responses={200: OperatorApplicationDetailOutput, **errors(409, 422)})
    def post(self, request, pk: int):
        data = validated_input(self.ApplicationDecisionInput, request.data)
        pool = data.pop("pool")
        application_decide(application=_app_or_404(pk), actor=request.user,
                           pool_id=pool.pk if pool else None, **data)
        return _detail_response(pk)


class OperatorApplicationBulkDecisionApi(APIView):
    permission_classes = [operator_access("rollout.change_application")]

    class ApplicationBulkDecisionInput(serializers.Serializer):
        applications = serializers.ListField(child=serializers.IntegerField(min_value=1),
                                             min_length=1, max_length=500)
        decision = serializers.ChoiceField(choices=[Decision.APPROVE, Decision.REJECT])
        reason = serializers.CharField(max_length=5_000)
        shared_reason = serializers.CharField(max_length=5_000, required=False, default="",
                                              allow_blank=True)

    @extend_schema(request=ApplicationBulkDecisionInput, responses={200: inline_serializer(
        "BulkDecisionResult",
        fields={"decided": serializers.ListField(child=serializers.IntegerField())}),
        **errors(404, 409)})
    def post(self, request):
        data = validated_input(self.ApplicationBulkDecisionInput, request.data)
        decided = applications_decide_bulk(
            application_ids=sorted(set(data["applications"])), decision=data["decision"],
            reason=data["reason"], shared_reason=data["shared_reason"], actor=request.user)
        return Response({"decided": [a.pk for a in decided]})


class OperatorApplicationScoreOverrideApi(APIView):
    permission_classes = [operator_access("rollout.change_application")]

    class ApplicationScoreOverrideInput(serializers.Serializer):
        score = serializers.IntegerField(allow_null=True, min_value=-1_000, max_value=1_000)
        reason = serializers.CharField(max_length=5_000)

    @extend_schema(request=ApplicationScoreOverrideInput,
                   responses={200: OperatorApplicationDetailOutput, **errors(409)})
    def post(self, request, pk: int):
        data = validated_input(self.ApplicationScoreOverrideInput, request.data)
        application_score_override(application=_app_or_404(pk), actor=request.user, **data)
        return _detail_response(pk)


class OperatorApplicationPoolApi(APIView):
    permission_classes = [operator_access("rollout.change_application")]

    class ApplicationPoolInput(serializers.Serializer):
        pool = serializers.PrimaryKeyRelatedField(queryset=CapacityPool.objects.all())

    @extend_schema(request=ApplicationPoolInput, responses=OperatorApplicationDetailOutput)
    def post(self, request, pk: int):
        data = validated_input(self.ApplicationPoolInput, request.data)
        org_pool_preference_set(org=_app_or_404(pk).org, pool=data["pool"], actor=request.user)
        return _detail_response(pk)



# --- Organization views ------------------------------------------------------------------------


def _membership(request, slug: str) -> Membership:
    membership = (Membership.objects.select_related("org__pool_preference__pool")
                  .filter(user=request.user, org__slug=slug).first())
    if membership is None:
        raise NotFound("No such organization.")
    return membership


def _require_manager(membership: Membership) -> None:
    if membership.role not in MEMBER_MANAGERS:
        raise PermissionDenied("Only owners and admins apply on behalf of the organization.")


class OrgApplicationListApi(APIView):
    @extend_schema(responses=OrgApplicationOutput(many=True))
    def get(self, request, slug: str):
        org = _membership(request, slug).org
        apps = Application.objects.filter(org=org).order_by("-submitted_at", "-id")
        return Response(OrgApplicationOutput(apps, many=True).data)

    @extend_schema(request=ApplicationInput, responses={201: OrgApplicationOutput, **errors(409)})
    def post(self, request, slug: str):
        membership = _membership(request, slug)
        _require_manager(membership)
        data = validated_input(ApplicationInput, request.data)
        app = application_submit(org=membership.org, data=data, actor=request.user)
        return Response(OrgApplicationOutput(app).data, status=status.HTTP_201_CREATED)


class OrgApplicationDetailApi(APIView):
    class OrgApplicationUpdateInput(ApplicationInput):
        response = serializers.CharField(max_length=10_000, required=False, default="",
                                         allow_blank=True)

    def _get(self, request, slug: str, pk: int) -> tuple[Membership, Application]:
        membership = _membership(request, slug)
        app = Application.objects.filter(org=membership.org, pk=pk).first()
        if app is None:
            raise NotFound("No such application.")
        return membership, app

    @extend_schema(responses=OrgApplicationOutput)
    def get(self, request, slug: str, pk: int):
        return Response(OrgApplicationOutput(self._get(request, slug, pk)[1]).data)

    @extend_schema(request=OrgApplicationUpdateInput,
                   responses={200: OrgApplicationOutput, **errors(409)})
    def patch(self, request, slug: str, pk: int):
        membership, app = self._get(request, slug, pk)
        _require_manager(membership)
        data = dict(validated_input(self.OrgApplicationUpdateInput, request.data, partial=True,
                                    context={"current_region": app.preferred_region}))
        response = data.pop("response", "")
        app = application_update(application=app, data=data, response=response,
                                 actor=request.user)
        return Response(OrgApplicationOutput(app).data)


class OrgWaitlistApi(APIView):
    @extend_schema(responses=inline_serializer("OrgWaitlist", fields={
        "status": serializers.CharField(),
        "application": serializers.CharField(allow_null=True),
        "estimate": EstimateOutput(allow_null=True)}))
    def get(self, request, slug: str):
        org = _membership(request, slug).org
        latest = org.applications.order_by("-submitted_at", "-id").first()
        estimate = org_waitlist_estimate(org=org)
        return Response({
            "status": org.status,
            "application": latest.state if latest else None,
            "estimate": EstimateOutput(estimate).data if estimate else None,
        })


# Included by config/urls.py under api/v1/.
urlpatterns = [
    path("operator/applications", OperatorApplicationListApi.as_view(),
         name="operator-applications"),
    path("operator/applications/bulk-decision", OperatorApplicationBulkDecisionApi.as_view(),
         name="operator-applications-bulk-decision"),
    path("operator/applications/<int:pk>", OperatorApplicationDetailApi.as_view(),
         name="operator-application"),
    path("operator/applications/<int:pk>/checklist", OperatorApplicationCheckApi.as_view(),
         name="operator-application-checklist"),
    path("operator/applications/<int:pk>/reviewer", OperatorApplicationReviewerApi.as_view(),
         name="operator-application-reviewer"),
    path("operator/applications/<int:pk>/notes", OperatorApplicationNoteApi.as_view(),
         name="operator-application-notes"),
    path("operator/applications/<int:pk>/decision", OperatorApplicationDecisionApi.as_view(),
         name="operator-application-decision"),
    path("operator/applications/<int:pk>/score-override",
         OperatorApplicationScoreOverrideApi.as_view(),
         name="operator-application-score-override"),
    path("operator/applications/<int:pk>/pool", OperatorApplicationPoolApi.as_view(),
         name="operator-application-pool"),
    path("org/<slug:slug>/applications", OrgApplicationListApi.as_view(),
         name="org-applications"),
    path("org/<slug:slug>/applications/<int:pk>", OrgApplicationDetailApi.as_view(),
         name="org-application"),
    path("org/<slug:slug>/waitlist", OrgWaitlistApi.as_view(), name="org-waitlist"),
]
