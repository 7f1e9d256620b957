from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from orgs.events import api_keys_changed
from orgs.models import ApiKey, Organization, OrgStatus
from orgs.services.audit import Actor, audit_record
from sluice.errors import Conflict, DomainError
from sluice.secrets import secret_issue
from sluice.transactions import nestable

API_KEY_KIND = "sk"


@nestable
@transaction.atomic(durable=True)
def api_key_create(
    *, org: Organization, name: str, actor: Actor, expires_at: datetime | None = None
) -> tuple[ApiKey, str]:
    """Returns the key and its secret. The secret is shown once and only its hash is kept."""
    # Lock the org so a key cannot be created while a suspension commits.
    org = Organization.objects.select_for_update().get(pk=org.pk)
    if org.status != OrgStatus.ACTIVE:
        raise Conflict(
            f"Only active organizations can create API keys ({org.name} is {org.status}).",
            code="org_not_active",
        )
    if expires_at is not None and expires_at <= timezone.now():
        raise DomainError("expires_at must be in the future.", code="invalid_expiry")
    name = name.strip()
    if not name:
        raise DomainError("An API key needs a name.", code="invalid_name")
    issued = secret_issue(kind=API_KEY_KIND)
    key = ApiKey.objects.create(
        org=org, name=name, lookup=issued.lookup, digest=issued.digest,
        created_by=actor if not isinstance(actor, str) else None, expires_at=expires_at,
    )
    audit_record(actor=actor, action="api_key.create", target=key, org=org,
                 after={"name": name, "prefix": key.display_prefix,
                        "expires_at": expires_at.isoformat() if expires_at else None})
    api_keys_changed.emit(org_id=org.pk)
    return key, issued.plaintext


@transaction.atomic(durable=True)
def api_key_revoke(*, key: ApiKey, actor: Actor) -> ApiKey:
    key = ApiKey.objects.select_for_update().get(pk=key.pk)
    if key.revoked_at is not None:
        raise Conflict("This API key is already revoked.", code="already_revoked")
    key.revoked_at = timezone.now()
    key.save(update_fields=["revoked_at"])
    audit_record(actor=actor, action="api_key.revoke", target=key, org=key.org,
                 after={"revoked_at": key.revoked_at.isoformat()})
    api_keys_changed.emit(org_id=key.org_id)
    return key


# Writing last_used_at on every request would put the database on the hot path; a key's last use
# is recorded at most once a minute, from usage ingestion.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def api_key_touch(*, key_ids: list[int], at: datetime) -> int:
    """Conditional update: rows already touched within the resolution are not rewritten."""
    stale = Q(last_used_at__isnull=True) | Q(last_used_at__lt=at - LAST_USED_RESOLUTION)
    return ApiKey.objects.filter(stale, pk__in=key_ids).update(last_used_at=at)
