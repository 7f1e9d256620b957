from django.contrib.auth.models import AbstractBaseUser
from django.db import models

from orgs.models import AuditEvent, Organization

# An actor is a user, or a label for the system part that acted ("celery:wave_open", "stripe").
Actor = AbstractBaseUser | str | None


def audit_record(
    *,
    actor: Actor,
    action: str,
    target: models.Model,
    org: Organization | None = None,
    before: dict | None = None,
    after: dict | None = None,
    reason: str = "",
) -> AuditEvent:
    """Append one event. Call inside the transaction that makes the change, so both or neither
    are stored."""
    user = actor if isinstance(actor, AbstractBaseUser) else None
    label = actor if isinstance(actor, str) else ""
    if user is not None and not user.is_authenticated:
        user = None
    return AuditEvent.objects.create(
        actor=user,
        actor_label=label or (user.get_username() if user else "system"),
        org=org,
        action=action,
        target_type=target._meta.label_lower,
        target_id=str(target.pk),
        before=before,
        after=after,
        reason=reason,
    )
