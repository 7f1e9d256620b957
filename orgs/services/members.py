from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from orgs.models import Invitation, Membership, Organization, Role
from orgs.notifications import invitation_email_queue
from orgs.services.audit import Actor, audit_record
from sluice.errors import Conflict, NotFound
from sluice.secrets import secret_issue, secret_matches, secret_parse_lookup
from sluice.transactions import nestable

User = get_user_model()
INVITATION_KIND = "inv"


def _membership_lock_with_owners(membership: Membership) -> Membership:
    """Lock the membership and every owner row of its org, in primary-key order: two
    concurrent demotions must not leave zero owners, nor wait on each other crosswise."""
    rows = {row.pk: row for row in Membership.objects.select_for_update().filter(
        Q(pk=membership.pk) | Q(org_id=membership.org_id, role=Role.OWNER)).order_by("pk")}
    if membership.pk not in rows:
        raise Membership.DoesNotExist
    return rows[membership.pk]


def _ensure_an_owner_remains(*, org: Organization, losing: Membership) -> None:
    if losing.role != Role.OWNER:
        return
    owners = Membership.objects.filter(org=org, role=Role.OWNER).exclude(pk=losing.pk)
    if not owners.exists():
        raise Conflict("An organization must keep at least one owner.", code="last_owner")


@nestable
@transaction.atomic(durable=True)
def membership_add(*, org: Organization, user, role: str, actor: Actor) -> Membership:
    try:
        with transaction.atomic():
            membership = Membership.objects.create(org=org, user=user, role=role)
    except IntegrityError:
        raise Conflict(f"{user} is already a member of {org}.", code="already_member") from None
    audit_record(actor=actor, action="membership.add", target=membership, org=org,
                 after={"user": user.get_username(), "role": role})
    return membership


@transaction.atomic(durable=True)
def membership_role_change(*, membership: Membership, role: str, actor: Actor) -> Membership:
    membership = _membership_lock_with_owners(membership)
    if role != Role.OWNER:
        _ensure_an_owner_remains(org=membership.org, losing=membership)
    before = {"role": membership.role}
    membership.role = role
    membership.save(update_fields=["role"])
    audit_record(actor=actor, action="membership.role_change", target=membership,
                 org=membership.org, before=before, after={"role": role})
    return membership


@transaction.atomic(durable=True)
def membership_remove(*, membership: Membership, actor: Actor) -> None:
    membership = _membership_lock_with_owners(membership)
    _ensure_an_owner_remains(org=membership.org, losing=membership)
    audit_record(actor=actor, action="membership.remove", target=membership,
                 org=membership.org,
                 before={"user": membership.user.get_username(), "role": membership.role})
    membership.delete()


@transaction.atomic(durable=True)
def invitation_create(
    *, org: Organization, email: str, role: str, actor: Actor
) -> tuple[Invitation, str]:
    """Returns the invitation and its token, which is emailed and never stored in clear."""
    issued = secret_issue(kind=INVITATION_KIND)
    invitation = Invitation.objects.create(
        org=org, email=email.strip().lower(), role=role, lookup=issued.lookup,
        token_digest=issued.digest,
        invited_by=actor if isinstance(actor, User) else None,
        expires_at=timezone.now() + timedelta(hours=settings.INVITATION_TTL_HOURS),
    )
    audit_record(actor=actor, action="invitation.create", target=invitation, org=org,
                 after={"email": invitation.email, "role": role})
    invitation_email_queue(invitation=invitation, token=issued.plaintext)
    return invitation, issued.plaintext


@transaction.atomic(durable=True)
def invitation_revoke(*, invitation: Invitation, actor: Actor) -> Invitation:
    invitation = Invitation.objects.select_for_update().get(pk=invitation.pk)
    if invitation.accepted_at or invitation.revoked_at:
        raise Conflict("This invitation is no longer pending.", code="invitation_not_pending")
    invitation.revoked_at = timezone.now()
    invitation.save(update_fields=["revoked_at"])
    audit_record(actor=actor, action="invitation.revoke", target=invitation, org=invitation.org)
    return invitation


@nestable
@transaction.atomic(durable=True)
def invitation_accept(*, token: str, user) -> Membership:
    lookup = secret_parse_lookup(token, kind=INVITATION_KIND)
    invitation = (
        Invitation.objects.select_for_update().filter(lookup=lookup).first() if lookup else None
    )
    # Unknown, forged and expired tokens look the same from outside.
    if invitation is None or not secret_matches(token, invitation.token_digest):
        raise NotFound("This invitation link is not valid.", code="invitation_invalid")
    if not invitation.is_pending():
        raise NotFound("This invitation has expired or was already used.",
                       code="invitation_invalid")
    membership = membership_add.nested(org=invitation.org, user=user, role=invitation.role,
                                       actor=user)
    invitation.accepted_at = timezone.now()
    invitation.accepted_by = user
    invitation.save(update_fields=["accepted_at", "accepted_by"])
    audit_record(actor=user, action="invitation.accept", target=invitation, org=invitation.org)
    return membership
