"""Reads for the portal, always scoped to what the signed-in user may see."""

from django.db.models import QuerySet
from django.http import Http404

from orgs.models import Invitation, Membership
from portal.models import VerifiedEmail
from rollout.models import Application


def memberships_for_user(*, user) -> QuerySet[Membership]:
    return Membership.objects.filter(user=user).select_related("org").order_by("org__name")


def membership_get(*, user, slug: str) -> Membership:
    """The user's membership in the org `slug`. Not a member and no such org look the same."""
    membership = memberships_for_user(user=user).filter(org__slug=slug).first()
    if membership is None:
        raise Http404("No such organization.")
    return membership




def org_invitations_pending(*, org) -> list[Invitation]:
    pending = Invitation.objects.filter(org=org, accepted_at__isnull=True,
                                        revoked_at__isnull=True).select_related("invited_by")
    return [invitation for invitation in pending if invitation.is_pending()]












def user_email_verified(*, user) -> bool:
    return VerifiedEmail.objects.filter(user=user, email=user.email).exists()


def org_latest_application(*, org) -> Application | None:
    """The org's newest application with its checklist (the items and whether they are done;
    the status page never shows the operators' notes)."""
    return (Application.objects.filter(org=org).order_by("-submitted_at", "-id")
            .prefetch_related("checks").first())



