"""Organizations over REST. Operators see every org; members see only their own (others: 404).

Views parse input, call one selector or service, render. Business rules live in the services.
"""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from orgs import services
from orgs.auth import ADMIN_KEY_AUTHENTICATION, ADMIN_KEY_THROTTLES
from orgs.models import (
    KEY_LIMIT_MANAGERS,
    KEY_MANAGERS,
    MEMBER_MANAGERS,
    Membership,
    OrgStatus,
    Role,
    ServiceTier,
)
from orgs.selectors import (
    operator_require,
    org_api_key_get,
    org_api_keys,
    org_get_for_principal,
    org_get_for_user,
    org_invitation_get,
    org_invitations,
    org_members,
    org_membership_get,
    org_require_role,
    orgs_visible_to,
    principal_actor,
)
from orgs.services.lifecycle import TRANSITIONS, org_allowed_actions
from sluice.api import break_bookings_field, validated_input
from sluice.openapi import errors
from sluice.pagination import PaginatedApi, paginate

ALL_ROLES = frozenset(Role.values)


class OrgOutput(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    slug = serializers.CharField()
    status = serializers.ChoiceField(choices=OrgStatus.choices)
    suspension_reason = serializers.CharField()
    status_changed_at = serializers.DateTimeField()
    created_at = serializers.DateTimeField()
    queue_threshold_default_ms = serializers.IntegerField(
        allow_null=True, help_text="How long the org's requests may wait for capacity when "
        "neither they (queue_threshold_ms) nor their API key say; null: not at all.")
    allowed_actions = serializers.SerializerMethodField()

    def get_allowed_actions(self, org) -> list[str]:
        return org_allowed_actions(org=org)


class OrgListApi(PaginatedApi, APIView):
    class FilterSerializer(serializers.Serializer):
        status = serializers.ChoiceField(choices=OrgStatus.choices, required=False)
        search = serializers.CharField(required=False, max_length=100)

    class InputSerializer(serializers.Serializer):
        name = serializers.CharField(max_length=200)
        slug = serializers.SlugField(max_length=80, required=False)

    @extend_schema(parameters=[FilterSerializer], responses=OrgOutput(many=True))
    def get(self, request):
        filters = validated_input(self.FilterSerializer, request.query_params)
        orgs = orgs_visible_to(user=request.user).order_by("name", "id")
        if "status" in filters:
            orgs = orgs.filter(status=filters["status"])
        if "search" in filters:
            orgs = orgs.filter(name__icontains=filters["search"])
        return paginate(request, self, orgs, OrgOutput)

    @extend_schema(request=InputSerializer, responses={201: OrgOutput, **errors(409)})
    def post(self, request):
        operator_require(user=request.user, perm="orgs.add_organization")
        data = validated_input(self.InputSerializer, request.data)
        org = services.org_create(actor=request.user, **data)
        return Response(OrgOutput(org).data, status=status.HTTP_201_CREATED)


class OrgDetailApi(APIView):
    authentication_classes = ADMIN_KEY_AUTHENTICATION
    throttle_classes = ADMIN_KEY_THROTTLES

    @extend_schema(responses=OrgOutput, description="Members, operators, and the org's own "
                   "admin keys (`Bearer sk_admin_...`).")
    def get(self, request, org_id: int):
        return Response(OrgOutput(org_get_for_principal(user=request.user, org_id=org_id)).data)

    class PatchInput(serializers.Serializer):
        queue_threshold_default_ms = serializers.IntegerField(allow_null=True)

    @extend_schema(request=PatchInput, responses={200: OrgOutput, **errors(422)},
                   description="Owners and admins (and the org's admin key): the org's default "
                   "wait budget, 0 or 50-20,000 ms, null for none.")
    def patch(self, request, org_id: int):
        org = org_get_for_principal(user=request.user, org_id=org_id)
        org_require_role(user=request.user, org=org, roles=KEY_LIMIT_MANAGERS,
                         perm="orgs.change_organization")
        data = validated_input(self.PatchInput, request.data)
        org = services.org_queue_default_set(org=org, ms=data["queue_threshold_default_ms"],
                                             actor=principal_actor(request.user))
        return Response(OrgOutput(org).data)


class OrgTransitionApi(APIView):
    class InputSerializer(serializers.Serializer):
        action = serializers.ChoiceField(choices=sorted(TRANSITIONS))
        reason = serializers.CharField(max_length=2000, required=False, default="")
        break_bookings = break_bookings_field(
            "Suspend and offboard: every booking of the org that has not ended, cancelled with "
            "a full refund and a notice.")

    @extend_schema(request=InputSerializer, responses={200: OrgOutput, **errors(409, 422)},
                   description="Move the organization through its lifecycle. An action that is "
                   "not legal from the current state answers 409 `illegal_transition`; review, "
                   "approve and reject of an org with an open application answer 409 "
                   "`application_open` (decide the application instead). Suspending or "
                   "offboarding an org with bookings that have not ended answers 422 "
                   "`org_has_bookings` with `details.conflicts` unless `break_bookings` names "
                   "every one of them.")
    def post(self, request, org_id: int):
        org = org_get_for_user(user=request.user, org_id=org_id)
        operator_require(user=request.user, perm="orgs.change_organization")
        data = validated_input(self.InputSerializer, request.data)
        org = services.org_transition(org=org, actor=request.user, **data)
        return Response(OrgOutput(org).data)


OWNER_RULE = ("Owners and admins manage members (operators too). Only an owner grants, changes "
              "or removes the owner role, or invites an owner: anyone else gets 403 "
              "`owner_required`. The last owner can be neither demoted nor removed: 409 "
              "`last_owner`.")


class MemberOutput(serializers.Serializer):
    id = serializers.IntegerField()
    email = serializers.CharField(source="user.email")
    role = serializers.ChoiceField(choices=Role.choices)
    created_at = serializers.DateTimeField()


class InvitationOutput(serializers.Serializer):
    id = serializers.IntegerField()
    email = serializers.EmailField()
    role = serializers.CharField()
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()
    accepted_at = serializers.DateTimeField(allow_null=True)
    revoked_at = serializers.DateTimeField(allow_null=True)


class InvitationInput(serializers.Serializer):
    email = serializers.EmailField()
    role = serializers.ChoiceField(choices=Role.choices)


def _invite(request, org_id: int):
    """What `POST .../members/` and `POST .../invitations/` both do: one invitation."""
    org = org_get_for_user(user=request.user, org_id=org_id)
    org_require_role(user=request.user, org=org, roles=MEMBER_MANAGERS,
                     perm="orgs.add_invitation")
    data = validated_input(InvitationInput, request.data)
    invitation, _token = services.invitation_create(org=org, actor=request.user, **data)
    return invitation


INVITATION_RULES = ("Inviting an owner takes an owner (403 `owner_required`); an address that "
                    "is already a member: 409 `already_member`. At most "
                    "SLUICE_INVITATION_RATE invitations per organization (default 50 a day): "
                    "429 `rate_limited` with `Retry-After`.")


class MemberListApi(PaginatedApi, APIView):

    @extend_schema(responses=MemberOutput(many=True))
    def get(self, request, org_id: int):
        org = org_get_for_user(user=request.user, org_id=org_id)
        return paginate(request, self, org_members(org=org), MemberOutput)

    @extend_schema(request=InvitationInput,
                   responses={202: InvitationOutput, **errors(409, 429)},
                   description="Invites the address: nobody joins an organization without "
                   "accepting. The answer is the same whether or not the address has an "
                   "account (202 and the invitation, as `POST .../invitations/`), so it tells "
                   "nothing about who uses Sluice. " + INVITATION_RULES)
    def post(self, request, org_id: int):
        return Response(InvitationOutput(_invite(request, org_id)).data,
                        status=status.HTTP_202_ACCEPTED)


class MemberDetailApi(APIView):
    class InputSerializer(serializers.Serializer):
        role = serializers.ChoiceField(choices=Role.choices)

    def _member(self, request, org_id: int, member_id: int) -> Membership:
        org = org_get_for_user(user=request.user, org_id=org_id)
        membership = org_membership_get(org=org, membership_id=member_id)
        org_require_role(user=request.user, org=org, roles=MEMBER_MANAGERS,
                         perm="orgs.change_membership")
        return membership

    @extend_schema(request=InputSerializer, responses={200: MemberOutput, **errors(409)},
                   description=OWNER_RULE)
    def patch(self, request, org_id: int, member_id: int):
        membership = self._member(request, org_id, member_id)
        data = validated_input(self.InputSerializer, request.data)
        membership = services.membership_role_change(
            membership=membership, role=data["role"], actor=request.user)
        return Response(MemberOutput(membership).data)

    @extend_schema(responses={204: None, **errors(409)}, description=OWNER_RULE)
    def delete(self, request, org_id: int, member_id: int):
        services.membership_remove(membership=self._member(request, org_id, member_id),
                                   actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class InvitationListApi(PaginatedApi, APIView):
    @extend_schema(responses=InvitationOutput(many=True))
    def get(self, request, org_id: int):
        org = org_get_for_user(user=request.user, org_id=org_id)
        org_require_role(user=request.user, org=org, roles=MEMBER_MANAGERS,
                         perm="orgs.view_invitation")
        return paginate(request, self, org_invitations(org=org), InvitationOutput)

    @extend_schema(request=InvitationInput,
                   responses={201: InvitationOutput, **errors(409, 429)},
                   description="Emails an invitation link that expires; the token is not "
                   "returned and is stored only as a hash. " + INVITATION_RULES)
    def post(self, request, org_id: int):
        return Response(InvitationOutput(_invite(request, org_id)).data,
                        status=status.HTTP_201_CREATED)


class InvitationRevokeApi(APIView):
    @extend_schema(request=None, responses={200: InvitationOutput, **errors(409)})
    def post(self, request, org_id: int, invitation_id: int):
        org = org_get_for_user(user=request.user, org_id=org_id)
        invitation = org_invitation_get(org=org, invitation_id=invitation_id)
        org_require_role(user=request.user, org=org, roles=MEMBER_MANAGERS,
                         perm="orgs.change_invitation")
        invitation = services.invitation_revoke(invitation=invitation, actor=request.user)
        return Response(InvitationOutput(invitation).data)


class InvitationAcceptApi(APIView):
    class InputSerializer(serializers.Serializer):
        token = serializers.CharField(max_length=200)

    @extend_schema(request=InputSerializer, responses={201: MemberOutput, **errors(404, 409)},
                   description="The signed-in user joins the org named by the emailed token. "
                   "Unknown, expired and used tokens all answer 404 `invitation_invalid`.")
    def post(self, request):
        data = validated_input(self.InputSerializer, request.data)
        membership = services.invitation_accept(token=data["token"],
                                                user=request.user)
        return Response(MemberOutput(membership).data, status=status.HTTP_201_CREATED)


class ApiKeyOutput(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    prefix = serializers.CharField(source="display_prefix")
    created_by = serializers.CharField(source="created_by.email", default=None, allow_null=True,
                                       help_text="null: created by an admin key or a script.")
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField(allow_null=True)
    revoked_at = serializers.DateTimeField(allow_null=True)
    last_used_at = serializers.DateTimeField(allow_null=True)
    default_service_tier = serializers.ChoiceField(
        choices=ServiceTier.choices, help_text="The tier of this key's requests that ask for "
        "`auto`: `default` keeps a batch key on standard pools.")
    slice_output_tps = serializers.IntegerField(
        allow_null=True, help_text="The key's own output tokens/s inside the org's allocation "
        "(input and output together where a pool meters them together); null: the org's.")
    slice_input_tps = serializers.IntegerField(allow_null=True,
                                               help_text="Its own input tokens/s; null: none.")
    slice_daily_tokens = serializers.IntegerField(allow_null=True,
                                                  help_text="Its own tokens per UTC day.")
    slice_max_concurrency = serializers.IntegerField(allow_null=True,
                                                     help_text="Its own concurrent requests.")
    queue_threshold_default_ms = serializers.IntegerField(
        allow_null=True, help_text="How long its requests may wait for capacity when they do "
        "not say; null: the org's default.")


class ApiKeyCreatedOutput(ApiKeyOutput):
    secret = serializers.CharField(help_text="The full key. Shown once; Sluice keeps a hash.")


class ApiKeyListApi(PaginatedApi, APIView):
    """Members, operators and the org's admin keys. Per-key limits (the admission issue) are not
    accepted yet: they join InputSerializer and ApiKeyOutput when the key model has them."""

    authentication_classes = ADMIN_KEY_AUTHENTICATION
    throttle_classes = ADMIN_KEY_THROTTLES

    class InputSerializer(serializers.Serializer):
        name = serializers.CharField(max_length=100)
        expires_at = serializers.DateTimeField(required=False, allow_null=True)

    @extend_schema(responses=ApiKeyOutput(many=True))
    def get(self, request, org_id: int):
        org = org_get_for_principal(user=request.user, org_id=org_id)
        return paginate(request, self, org_api_keys(org=org), ApiKeyOutput)

    @extend_schema(request=InputSerializer, responses={201: ApiKeyCreatedOutput, **errors(409)},
                   description="Owners, admins and developers (and admin keys with such a "
                   "creator). A member whose email address is not confirmed gets 403 "
                   "`email_unverified`; only active organizations create keys (409 "
                   "`org_not_active`).")
    def post(self, request, org_id: int):
        org = org_get_for_principal(user=request.user, org_id=org_id)
        org_require_role(user=request.user, org=org, roles=KEY_MANAGERS, perm="orgs.add_apikey")
        data = validated_input(self.InputSerializer, request.data)
        key, secret = services.api_key_create(org=org, actor=principal_actor(request.user),
                                              **data)
        body = ApiKeyOutput(key).data | {"secret": secret}
        return Response(body, status=status.HTTP_201_CREATED)


class ApiKeyRevokeApi(APIView):
    authentication_classes = ADMIN_KEY_AUTHENTICATION
    throttle_classes = ADMIN_KEY_THROTTLES

    @extend_schema(request=None, responses={200: ApiKeyOutput, **errors(409)})
    def post(self, request, org_id: int, key_id: int):
        org = org_get_for_principal(user=request.user, org_id=org_id)
        key = org_api_key_get(org=org, key_id=key_id)
        org_require_role(user=request.user, org=org, roles=KEY_MANAGERS,
                         perm="orgs.change_apikey")
        key = services.api_key_revoke(key=key, actor=principal_actor(request.user))
        return Response(ApiKeyOutput(key).data)


class ApiKeyLimitsApi(APIView):
    authentication_classes = ADMIN_KEY_AUTHENTICATION
    throttle_classes = ADMIN_KEY_THROTTLES

    class InputSerializer(serializers.Serializer):
        slice_output_tps = serializers.IntegerField(min_value=1, required=False, allow_null=True)
        slice_input_tps = serializers.IntegerField(min_value=1, required=False, allow_null=True)
        slice_daily_tokens = serializers.IntegerField(min_value=1, required=False,
                                                      allow_null=True)
        slice_max_concurrency = serializers.IntegerField(min_value=1, required=False,
                                                         allow_null=True)
        default_service_tier = serializers.ChoiceField(choices=ServiceTier.choices,
                                                       default=ServiceTier.AUTO)
        queue_threshold_default_ms = serializers.IntegerField(required=False, allow_null=True)

    @extend_schema(request=InputSerializer, responses={200: ApiKeyOutput, **errors(409, 422)},
                   description="Replace the key's own slice of the org's limits (absent or "
                   "null: the org's alone) and its default service tier; owners, admins and "
                   "the org's admin key. A slice above what the org's allocation allows "
                   "answers 422 `key_slice_above_allocation` naming each field.")
    def put(self, request, org_id: int, key_id: int):
        org = org_get_for_principal(user=request.user, org_id=org_id)
        key = org_api_key_get(org=org, key_id=key_id)
        org_require_role(user=request.user, org=org, roles=KEY_LIMIT_MANAGERS,
                         perm="orgs.change_apikey")
        data = validated_input(self.InputSerializer, request.data)
        key_slice = services.KeySlice(
            output_tps=data.get("slice_output_tps"), input_tps=data.get("slice_input_tps"),
            daily_tokens=data.get("slice_daily_tokens"),
            max_concurrency=data.get("slice_max_concurrency"))
        key = services.api_key_limits_set(key=key, key_slice=key_slice,
                                          actor=principal_actor(request.user),
                                          default_service_tier=data["default_service_tier"],
                                          queue_threshold_default_ms=data.get(
                                              "queue_threshold_default_ms"))
        return Response(ApiKeyOutput(key).data)
