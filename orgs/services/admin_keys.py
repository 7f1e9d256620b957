"""Admin keys: created and revoked by an org's owners and admins (the portal checks the role),
shown once, stored as a SHA-256 digest (sluice/secrets.py), audited."""

from django.db import transaction
from django.utils import timezone

from orgs.events import key_creating
from orgs.models import AdminKey, Organization, OrgStatus
from orgs.services.audit import Actor, audit_record
from sluice.errors import Conflict, DomainError
from sluice.secrets import secret_issue

ADMIN_KEY_KIND = "sk_admin"


@transaction.atomic(durable=True)
def admin_key_create(*, org: Organization, name: str, actor: Actor) -> tuple[AdminKey, str]:
    """Returns the key and its secret, which is shown once. Waitlisted orgs may create one too:
    their webhooks and (empty) usage are theirs to automate before admission."""
    org = Organization.objects.select_for_update().get(pk=org.pk)
    if org.status == OrgStatus.OFFBOARDED:
        raise Conflict("An offboarded organization cannot create admin keys.",
                       code="org_not_active")
    name = name.strip()
    if not name:
        raise DomainError("An admin key needs a name.", code="invalid_name")
    key_creating.emit(org=org, actor=actor)
    issued = secret_issue(kind=ADMIN_KEY_KIND)
    key = AdminKey.objects.create(org=org, name=name, lookup=issued.lookup,
                                  digest=issued.digest,
                                  created_by=actor if not isinstance(actor, str) else None)
    audit_record(actor=actor, action="admin_key.create", target=key, org=org,
                 after={"name": name, "prefix": key.display_prefix})
    return key, issued.plaintext


@transaction.atomic(durable=True)
def admin_key_revoke(*, key: AdminKey, actor: Actor) -> AdminKey:
    """Takes effect on the key's next request: authentication reads the row every time."""
    key = AdminKey.objects.select_for_update().get(pk=key.pk)
    if key.revoked_at is not None:
        raise Conflict("This admin key is already revoked.", code="already_revoked")
    key.revoked_at = timezone.now()
    key.save(update_fields=["revoked_at"])
    audit_record(actor=actor, action="admin_key.revoke", target=key, org=key.org,
                 after={"revoked_at": key.revoked_at.isoformat()})
    return key
