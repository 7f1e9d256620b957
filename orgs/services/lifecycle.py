"""The organization lifecycle: one function per transition, all through `_org_transition`.

    applied -> in_review -> approved -> active <-> suspended
        \\          \\-> rejected -> applied (re-application)
    approved / active / suspended / rejected -> offboarded
"""

from collections.abc import Sequence

from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify

from orgs.events import org_service_stopping, org_transition_requested, org_transitioned
from orgs.models import Organization, OrgStatus, SuspensionReason
from orgs.notifications import org_email_queue
from orgs.services.audit import Actor, audit_record
from sluice.errors import Conflict, DomainError, IllegalTransition
from sluice.transactions import nestable, nested_atomic

S = OrgStatus

# action -> (states it may start from, state it leads to)
TRANSITIONS: dict[str, tuple[frozenset[str], str]] = {
    "review_start": (frozenset({S.APPLIED}), S.IN_REVIEW),
    "approve": (frozenset({S.IN_REVIEW}), S.APPROVED),
    "reject": (frozenset({S.APPLIED, S.IN_REVIEW}), S.REJECTED),
    "admit": (frozenset({S.APPROVED}), S.ACTIVE),
    "suspend": (frozenset({S.ACTIVE}), S.SUSPENDED),
    "restore": (frozenset({S.SUSPENDED}), S.ACTIVE),
    "offboard": (frozenset({S.APPROVED, S.ACTIVE, S.SUSPENDED, S.REJECTED}), S.OFFBOARDED),
    "reapply": (frozenset({S.REJECTED}), S.APPLIED),
}


# The transitions that stop an org's traffic, and so break the bookings it holds.
STOPS_SERVICE = frozenset({"suspend", "offboard"})


def org_allowed_actions(*, org: Organization) -> list[str]:
    return [action for action, (sources, _) in TRANSITIONS.items() if org.status in sources]


@nested_atomic
def _org_transition(
    *, org: Organization, action: str, actor: Actor, reason: str = "",
    suspension_reason: str = "", break_bookings: Sequence[int] = (),
) -> Organization:
    sources, target = TRANSITIONS[action]
    # Lock the row: two operators clicking at once must not both pass the source-state check.
    locked = Organization.objects.select_for_update().get(pk=org.pk)
    if locked.status not in sources:
        raise IllegalTransition(
            f"Cannot {action.replace('_', ' ')} an organization that is {locked.status}.",
            details={"status": locked.status, "action": action,
                     "allowed_from": sorted(sources)},
        )
    before = {"status": locked.status, "suspension_reason": locked.suspension_reason}
    locked.status = target
    locked.suspension_reason = suspension_reason
    locked.status_changed_at = timezone.now()
    locked.save(update_fields=["status", "suspension_reason", "status_changed_at", "updated_at"])
    audit_record(
        actor=actor, action=f"org.{action}", target=locked, org=locked, before=before,
        after={"status": target, "suspension_reason": suspension_reason}, reason=reason,
    )
    org_email_queue(org=locked, action=action)
    if action in STOPS_SERVICE:
        # Quotas refuses unless the operator names the bookings this breaks, and cancels them.
        org_service_stopping.emit(org=locked, action=action, actor=actor, reason=reason,
                                  break_bookings=list(break_bookings))
    # Higher apps act in this transaction: quotas republishes limits (after commit) and, on
    # offboarding, returns the org's guarantees to its pools; rollout marks an admitted org's
    # application and sends the waitlist emails; billing creates a Stripe customer on
    # admission.
    org_transitioned.emit(org=locked, action=action, actor=actor, reason=reason)
    # Keep the caller's instance in step with the database.
    org.status, org.suspension_reason = locked.status, locked.suspension_reason
    org.status_changed_at = locked.status_changed_at
    return locked


def _unique_slug(name: str) -> str:
    base = slugify(name)[:70] or "org"
    slug, n = base, 1
    while Organization.objects.filter(slug=slug).exists():
        n += 1
        slug = f"{base}-{n}"
    return slug


@nestable
@transaction.atomic(durable=True)
def org_create(*, name: str, actor: Actor, slug: str = "") -> Organization:
    name = name.strip()
    if not name:
        raise Conflict("An organization needs a name.", code="invalid_name")
    if slug and Organization.objects.filter(slug=slug).exists():
        raise Conflict(f"The slug {slug!r} is taken.", code="slug_taken")
    org = Organization.objects.create(name=name, slug=slug or _unique_slug(name))
    audit_record(actor=actor, action="org.create", target=org, org=org,
                 after={"name": org.name, "status": org.status})
    return org


@nestable
@transaction.atomic(durable=True)
def org_rename(*, org: Organization, name: str, actor: Actor) -> Organization:
    org = Organization.objects.select_for_update().get(pk=org.pk)
    name = name.strip()
    if not name:
        raise Conflict("An organization needs a name.", code="invalid_name")
    before = {"name": org.name}
    org.name = name
    org.save(update_fields=["name", "updated_at"])
    audit_record(actor=actor, action="org.rename", target=org, org=org, before=before,
                 after={"name": name})
    return org


@nestable
@transaction.atomic(durable=True)
def org_review_start(*, org: Organization, actor: Actor) -> Organization:
    return _org_transition(org=org, action="review_start", actor=actor)


@nestable
@transaction.atomic(durable=True)
def org_approve(*, org: Organization, actor: Actor, reason: str = "") -> Organization:
    return _org_transition(org=org, action="approve", actor=actor, reason=reason)


@nestable
@transaction.atomic(durable=True)
def org_reject(*, org: Organization, actor: Actor, reason: str = "") -> Organization:
    return _org_transition(org=org, action="reject", actor=actor, reason=reason)


@nestable
@transaction.atomic(durable=True)
def org_admit(*, org: Organization, actor: Actor, reason: str = "") -> Organization:
    """Admitted by a wave, by auto-admission or by an operator's button: rollout marks the
    org's approved application admitted too (its receiver of `org_transitioned`), whichever
    path admitted it."""
    return _org_transition(org=org, action="admit", actor=actor, reason=reason)


@nestable
@transaction.atomic(durable=True)
def org_suspend(
    *, org: Organization, actor: Actor, reason: str = "",
    cause: str = SuspensionReason.OPERATOR, break_bookings: Sequence[int] = (),
) -> Organization:
    """Suspension keeps API keys but stops traffic: authorize checks the org's status. Its
    bookings that have not ended must be named in `break_bookings` (refused otherwise): they
    are cancelled with a full refund (`org_service_stopping`)."""
    return _org_transition(
        org=org, action="suspend", actor=actor, reason=reason, suspension_reason=cause,
        break_bookings=break_bookings,
    )


@nestable
@transaction.atomic(durable=True)
def org_restore(*, org: Organization, actor: Actor, reason: str = "") -> Organization:
    return _org_transition(org=org, action="restore", actor=actor, reason=reason)


@nestable
@transaction.atomic(durable=True)
def org_offboard(*, org: Organization, actor: Actor, reason: str = "",
                 break_bookings: Sequence[int] = ()) -> Organization:
    """Its bookings that have not ended must be named, as for a suspension. Quotas ends the
    org's allocations in this transaction (its org_transitioned receiver)."""
    return _org_transition(org=org, action="offboard", actor=actor, reason=reason,
                           break_bookings=break_bookings)


@nestable
@transaction.atomic(durable=True)
def org_reapply(*, org: Organization, actor: Actor, reason: str = "") -> Organization:
    return _org_transition(org=org, action="reapply", actor=actor, reason=reason)


@transaction.atomic(durable=True)
def org_transition(*, org: Organization, action: str, actor: Actor,
                   reason: str = "", break_bookings: Sequence[int] = ()) -> Organization:
    """The operator's lifecycle button (REST and console): one action by name."""
    services = {
        "review_start": org_review_start, "approve": org_approve, "reject": org_reject,
        "admit": org_admit, "suspend": org_suspend, "restore": org_restore,
        "offboard": org_offboard, "reapply": org_reapply,
    }
    if action not in services:
        raise DomainError(f"Unknown lifecycle action {action!r}.", code="unknown_action",
                          details={"allowed": sorted(services)})
    if break_bookings and action not in STOPS_SERVICE:
        raise DomainError(f"{action.replace('_', ' ').capitalize()} breaks no booking.",
                          code="booking_not_in_conflict",
                          fields={"break_bookings": ["Only a suspension or an offboarding "
                                                     "breaks bookings."]})
    # Rollout refuses the decisions that belong to an open application.
    org_transition_requested.emit(org=org, action=action)
    if action == "review_start":
        return org_review_start.nested(org=org, actor=actor)
    if action in STOPS_SERVICE:
        return services[action].nested(org=org, actor=actor, reason=reason,
                                       break_bookings=break_bookings)
    return services[action].nested(org=org, actor=actor, reason=reason)
