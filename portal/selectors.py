"""Reads for the portal, always scoped to what the signed-in user may see."""

from django.db.models import QuerySet
from django.http import Http404

from orgs.models import ApiKey, Application, Invitation, Membership
from portal.models import VerifiedEmail
from quotas.models import Allocation, QuotaRequest
from quotas.selectors import allocations_in_force


def memberships_for_user(*, user) -> QuerySet[Membership]:
    return Membership.objects.filter(user=user).select_related("org").order_by("org__name")


def membership_get(*, user, slug: str) -> Membership:
    """The user's membership in the org `slug`. Not a member and no such org look the same."""
    membership = memberships_for_user(user=user).filter(org__slug=slug).first()
    if membership is None:
        raise Http404("No such organization.")
    return membership


def org_members(*, org) -> QuerySet[Membership]:
    return Membership.objects.filter(org=org).select_related("user").order_by("user__email")


def org_invitations_pending(*, org) -> list[Invitation]:
    pending = Invitation.objects.filter(org=org, accepted_at__isnull=True,
                                        revoked_at__isnull=True).select_related("invited_by")
    return [invitation for invitation in pending if invitation.is_pending()]


def org_api_keys(*, org) -> QuerySet[ApiKey]:
    return ApiKey.objects.filter(org=org).select_related("created_by")


def org_api_key_get(*, org, key_id: int) -> ApiKey:
    key = ApiKey.objects.filter(org=org, pk=key_id).first()
    if key is None:
        raise Http404("No such API key.")
    return key


def org_member_get(*, org, membership_id: int) -> Membership:
    membership = Membership.objects.filter(org=org, pk=membership_id).select_related("user").first()
    if membership is None:
        raise Http404("No such member.")
    return membership


def org_invitation_get(*, org, invitation_id: int) -> Invitation:
    invitation = Invitation.objects.filter(org=org, pk=invitation_id).first()
    if invitation is None:
        raise Http404("No such invitation.")
    return invitation


def org_allocations(*, org) -> QuerySet[Allocation]:
    return allocations_in_force().filter(org=org).select_related("pool").order_by("pool__model")


def user_email_verified(*, user) -> bool:
    return VerifiedEmail.objects.filter(user=user, email=user.email).exists()


def org_latest_application(*, org) -> Application | None:
    """The org's newest application with its checklist (the items and whether they are done;
    the status page never shows the operators' notes)."""
    return (Application.objects.filter(org=org).order_by("-submitted_at", "-id")
            .prefetch_related("checks").first())


def org_quota_requests(*, org) -> QuerySet[QuotaRequest]:
    return QuotaRequest.objects.filter(org=org).select_related("pool")


def org_quota_request_get(*, org, request_id: int) -> QuotaRequest:
    quota_request = QuotaRequest.objects.filter(org=org, pk=request_id).first()
    if quota_request is None:
        raise Http404("No such quota request.")
    return quota_request
