"""Reads, always scoped to what the asking user may see.

An org the user may not see raises NotFound, exactly like one that does not exist: "can't see it"
and "doesn't exist" must be indistinguishable from outside.
"""

from django.apps import apps
from django.db.models import QuerySet

from orgs.auth import AdminKeyPrincipal
from orgs.models import AdminKey, ApiKey, Invitation, Membership, Organization
from orgs.operators import user_is_operator
from orgs.services.audit import Actor
from sluice.errors import NotFound, PermissionDenied


def operator_require(*, user, perm: str) -> None:
    """Staff may read everything; changing things needs the model permission (support staff
    are read-only, see the console's groups)."""
    if not (user_is_operator(user) and user.has_perm(perm)):
        raise PermissionDenied("This action needs operator permissions.",
                               code="operator_permission_required")


def orgs_visible_to(*, user) -> QuerySet[Organization]:
    if user_is_operator(user):
        return Organization.objects.all()
    return Organization.objects.filter(memberships__user=user)


def org_get_for_user(*, user, org_id: int) -> Organization:
    org = orgs_visible_to(user=user).filter(pk=org_id).first()
    if org is None:
        raise NotFound("No such organization.")
    return org


def org_get_for_principal(*, user, org_id: int) -> Organization:
    """The org of an org-facing endpoint that admin keys may call. An admin key acts for its own
    org only: any other org id is a 404, like one that does not exist."""
    if isinstance(user, AdminKeyPrincipal):
        if org_id != user.org_id:
            raise NotFound("No such organization.")
        return user.key.org
    return org_get_for_user(user=user, org_id=org_id)


def principal_actor(user) -> Actor:
    """Who the audit log names: the user, or the admin key."""
    return user.actor if isinstance(user, AdminKeyPrincipal) else user


def membership_role(*, user, org: Organization) -> str | None:
    return (Membership.objects.filter(user=user, org=org).values_list("role", flat=True)
            .first())


def org_require_role(*, user, org: Organization, roles: frozenset[str], perm: str) -> None:
    """Members need one of `roles`; operators need the model permission `perm`; an admin key
    acts in its own org with its creator's role (orgs.auth)."""
    if isinstance(user, AdminKeyPrincipal):
        if org.pk != user.org_id:
            raise NotFound("No such organization.")
        if user.role not in roles:
            raise PermissionDenied("The role of this admin key's creator does not allow this.",
                                   code="role_not_allowed")
        return
    if user_is_operator(user):
        operator_require(user=user, perm=perm)
        return
    if membership_role(user=user, org=org) not in roles:
        raise PermissionDenied("Your role in this organization does not allow this.",
                               code="role_not_allowed")


def org_members(*, org: Organization) -> QuerySet[Membership]:
    return Membership.objects.filter(org=org).select_related("user").order_by("created_at")


def org_membership_get(*, org: Organization, membership_id: int) -> Membership:
    membership = org_members(org=org).filter(pk=membership_id).first()
    if membership is None:
        raise NotFound("No such member.")
    return membership


def org_api_keys(*, org: Organization) -> QuerySet[ApiKey]:
    return ApiKey.objects.filter(org=org).select_related("created_by")


def org_api_key_get(*, org: Organization, key_id: int) -> ApiKey:
    key = org_api_keys(org=org).filter(pk=key_id).first()
    if key is None:
        raise NotFound("No such API key.")
    return key


def org_admin_keys(*, org: Organization) -> QuerySet[AdminKey]:
    """Each with `creator_role`, the role it acts with now (orgs.auth)."""
    return AdminKey.objects.filter(org=org).select_related("created_by").with_creator_role()


def org_admin_key_get(*, org: Organization, key_id: int) -> AdminKey:
    key = org_admin_keys(org=org).filter(pk=key_id).first()
    if key is None:
        raise NotFound("No such admin key.")
    return key


def org_invitations(*, org: Organization) -> QuerySet[Invitation]:
    return Invitation.objects.filter(org=org).select_related("invited_by")


def org_invitation_get(*, org: Organization, invitation_id: int) -> Invitation:
    invitation = org_invitations(org=org).filter(pk=invitation_id).first()
    if invitation is None:
        raise NotFound("No such invitation.")
    return invitation


def audit_target_labels(label: str) -> list[str]:
    """The labels audit rows carry for the model named `label` (old or current): its current
    one, and those it had before it moved between apps (its FORMER_LABELS). The audit log is
    append-only, so a moved model's history stays under the label it was written with."""
    for model in apps.get_models():
        labels = [model._meta.label_lower, *getattr(model, "FORMER_LABELS", ())]
        if label.lower() in labels:
            return labels
    return [label]
