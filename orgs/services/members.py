from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import Count, Min, Q
from django.utils import timezone

from orgs.models import AdminKey, Invitation, Membership, Organization, Role
from orgs.notifications import INVITATION_KIND, invitation_email_queue
from orgs.operators import user_is_operator
from orgs.services.audit import Actor, audit_record
from sluice.errors import Conflict, NotFound, PermissionDenied, RateLimited
from sluice.secrets import secret_issue_derived, secret_matches, secret_parse_lookup
from sluice.transactions import nestable

User = get_user_model()


def _lock_with_owners(*, org_id: int, membership_pk: int | None = None
                      ) -> tuple[Membership | None, set[int]]:
    """Lock the membership (if any) and every owner row of its org, in primary-key order: two
    concurrent demotions must not leave zero owners, nor wait on each other crosswise. Returns
    the locked membership and the user ids of the owners."""
    rows = list(Membership.objects.select_for_update().filter(
        Q(pk=membership_pk) | Q(org_id=org_id, role=Role.OWNER)).order_by("pk"))
    membership = next((row for row in rows if row.pk == membership_pk), None)
    if membership_pk is not None and membership is None:
        raise Membership.DoesNotExist
    return membership, {row.user_id for row in rows if row.role == Role.OWNER}


def _owner_rights_require(*, actor: Actor, owner_ids: set[int]) -> None:
    """Only owners grant, change or remove the owner role, and invite owners: an admin who
    could make themselves owner could then remove every owner and hold the org alone.
    Operators may (the console and the operator API), and so may the system: a command or a
    task acts for whoever ran it. Admin keys never manage members, so no key label gets here.
    Call with the owners locked, so a concurrent demotion of the actor is seen."""
    if actor is None or isinstance(actor, str) or user_is_operator(actor):
        return
    if actor.pk not in owner_ids:
        raise PermissionDenied("Only an owner can grant, change or remove the owner role.",
                               code="owner_required")


def _an_owner_remains(*, losing: Membership, owner_ids: set[int]) -> None:
    if losing.role == Role.OWNER and not owner_ids - {losing.user_id}:
        raise Conflict("An organization must keep at least one owner.", code="last_owner")


def _membership_insert(*, org: Organization, user, role: str, actor: Actor) -> Membership:
    try:
        with transaction.atomic():
            membership = Membership.objects.create(org=org, user=user, role=role)
    except IntegrityError:
        raise Conflict(f"{user} is already a member of {org}.", code="already_member") from None
    audit_record(actor=actor, action="membership.add", target=membership, org=org,
                 after={"user": user.get_username(), "role": role})
    return membership


@nestable
@transaction.atomic(durable=True)
def membership_add(*, org: Organization, user, role: str, actor: Actor) -> Membership:
    """The first owner of an org that has none is whoever founded it; after that, only an owner
    grants the owner role."""
    _membership, owner_ids = _lock_with_owners(org_id=org.pk)
    if role == Role.OWNER and owner_ids:
        _owner_rights_require(actor=actor, owner_ids=owner_ids)
    return _membership_insert(org=org, user=user, role=role, actor=actor)


@transaction.atomic(durable=True)
def membership_role_change(*, membership: Membership, role: str, actor: Actor) -> Membership:
    membership, owner_ids = _lock_with_owners(org_id=membership.org_id,
                                              membership_pk=membership.pk)
    if Role.OWNER in (membership.role, role):
        _owner_rights_require(actor=actor, owner_ids=owner_ids)
    if role != Role.OWNER:
        _an_owner_remains(losing=membership, owner_ids=owner_ids)
    before = {"role": membership.role}
    membership.role = role
    membership.save(update_fields=["role"])
    audit_record(actor=actor, action="membership.role_change", target=membership,
                 org=membership.org, before=before, after={"role": role})
    return membership


@transaction.atomic(durable=True)
def membership_remove(*, membership: Membership, actor: Actor) -> None:
    membership, owner_ids = _lock_with_owners(org_id=membership.org_id,
                                              membership_pk=membership.pk)
    if membership.role == Role.OWNER:
        _owner_rights_require(actor=actor, owner_ids=owner_ids)
    _an_owner_remains(losing=membership, owner_ids=owner_ids)
    audit_record(actor=actor, action="membership.remove", target=membership,
                 org=membership.org,
                 before={"user": membership.user.get_username(), "role": membership.role})
    membership.delete()
    _admin_keys_of_departed_revoke(membership=membership, actor=actor)


def _admin_keys_of_departed_revoke(*, membership: Membership, actor: Actor) -> None:
    """An admin key acts with its creator's rights: a creator who leaves takes them along.
    Revoked (not only refused at authentication, which also happens) so the portal lists the
    keys as revoked and a later return to the org does not bring them back to life."""
    now = timezone.now()
    for key in AdminKey.objects.select_for_update().filter(
            org_id=membership.org_id, created_by_id=membership.user_id,
            revoked_at__isnull=True).order_by("pk"):
        key.revoked_at = now
        key.save(update_fields=["revoked_at"])
        audit_record(actor=actor, action="admin_key.revoke", target=key, org=membership.org,
                     after={"revoked_at": now.isoformat()},
                     reason="its creator left the organization")


def _invitation_rate_check(*, org: Organization) -> None:
    """At most SLUICE_INVITATION_RATE invitations per org in a sliding window: each one emails
    an address the org chose, so an org (or a stolen session) cannot make Sluice a mailer."""
    rate, now = settings.INVITATION_RATE, timezone.now()
    recent = Invitation.objects.filter(org=org, created_at__gt=now - timedelta(
        seconds=rate.seconds)).aggregate(count=Count("id"), oldest=Min("created_at"))
    if recent["count"] >= rate.count:
        wait = recent["oldest"] + timedelta(seconds=rate.seconds) - now
        raise RateLimited(f"{org.name} has sent {recent['count']} invitations in the last "
                          f"{timedelta(seconds=rate.seconds)}; the limit is {rate}.",
                          retry_after_seconds=max(int(wait.total_seconds()) + 1, 1))


@transaction.atomic(durable=True)
def invitation_create(
    *, org: Organization, email: str, role: str, actor: Actor
) -> tuple[Invitation, str]:
    """Returns the invitation and its token, which is emailed and never stored in clear.
    Whether the address has an account is neither asked nor told: whoever accepts joins."""
    # The org first (the house's lock order): invitations counted under it cannot race past
    # the rate.
    org = Organization.objects.select_for_update().get(pk=org.pk)
    if role == Role.OWNER:
        _membership, owner_ids = _lock_with_owners(org_id=org.pk)
        _owner_rights_require(actor=actor, owner_ids=owner_ids)
    _invitation_rate_check(org=org)
    email = email.strip().lower()
    if Membership.objects.filter(org=org, user__email__iexact=email).exists():
        raise Conflict(f"{email} is already a member of {org}.", code="already_member")
    # Derived from the secret key, so the email built after the commit can make it again
    # and it need not wait in the outbox in clear.
    issued = secret_issue_derived(kind=INVITATION_KIND, key=settings.SECRET_KEY)
    invitation = Invitation.objects.create(
        org=org, email=email, role=role, lookup=issued.lookup,
        token_digest=issued.digest,
        invited_by=actor if isinstance(actor, User) else None,
        expires_at=timezone.now() + timedelta(hours=settings.INVITATION_TTL_HOURS),
    )
    audit_record(actor=actor, action="invitation.create", target=invitation, org=org,
                 after={"email": invitation.email, "role": role})
    invitation_email_queue(invitation=invitation)
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
    # The owner rule was applied when the invitation was made: an owner invited an owner.
    membership = _membership_insert(org=invitation.org, user=user, role=invitation.role,
                                    actor=user)
    invitation.accepted_at = timezone.now()
    invitation.accepted_by = user
    invitation.save(update_fields=["accepted_at", "accepted_by"])
    audit_record(actor=user, action="invitation.accept", target=invitation, org=invitation.org)
    return membership
