from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from orgs.events import api_key_slice_checking, api_keys_changed, key_creating
from orgs.models import ApiKey, Organization, OrgStatus, ServiceTier
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
    key_creating.emit(org=org, actor=actor)
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


@dataclass(frozen=True)
class KeySlice:
    """An API key's own limits inside its org's allocation, in every pool (None: the org's
    alone): output tokens/s (input and output where a pool meters them together), input
    tokens/s, tokens a UTC day, concurrent requests."""
    output_tps: int | None = None
    input_tps: int | None = None
    daily_tokens: int | None = None
    max_concurrency: int | None = None


def _slice_of(key: ApiKey) -> dict:
    return {"slice_output_tps": key.slice_output_tps, "slice_input_tps": key.slice_input_tps,
            "slice_daily_tokens": key.slice_daily_tokens,
            "slice_max_concurrency": key.slice_max_concurrency,
            "default_service_tier": key.default_service_tier,
            "queue_threshold_default_ms": key.queue_threshold_default_ms}


# A default wait budget, as authorize's queue_threshold_ms takes it: 0 or 50 to 20,000 ms.
QUEUE_DEFAULT_MS = (50, 20_000)


def queue_default_errors(name: str, ms: int | None) -> dict:
    if ms is None or ms == 0 or QUEUE_DEFAULT_MS[0] <= ms <= QUEUE_DEFAULT_MS[1]:
        return {}
    return {name: [f"Must be empty, 0, or from {QUEUE_DEFAULT_MS[0]} to {QUEUE_DEFAULT_MS[1]}."]}


@transaction.atomic(durable=True)
def org_queue_default_set(*, org: Organization, ms: int | None, actor: Actor) -> Organization:
    """How long the org's requests may wait for capacity when neither they nor their API key
    say (admission/); None: not at all. Published to the engine with the org's limits."""
    errors = queue_default_errors("queue_threshold_default_ms", ms)
    if errors:
        raise DomainError("The default wait is invalid.", code="invalid_queue_threshold",
                          fields=errors)
    org = Organization.objects.select_for_update().get(pk=org.pk)
    before = {"queue_threshold_default_ms": org.queue_threshold_default_ms}
    org.queue_threshold_default_ms = ms
    org.save(update_fields=["queue_threshold_default_ms", "updated_at"])
    audit_record(actor=actor, action="org.queue_default_set", target=org, org=org,
                 before=before, after={"queue_threshold_default_ms": ms})
    api_keys_changed.emit(org_id=org.pk)  # republishes the org: its defaults travel with it
    return org


@transaction.atomic(durable=True)
def api_key_limits_set(*, key: ApiKey, key_slice: KeySlice, default_service_tier: str,
                       actor: Actor, queue_threshold_default_ms: int | None = None) -> ApiKey:
    """Give a key its own slice of the org's limits (replacing any) and its default service
    tier. Refused (422 `key_slice_above_allocation`) when a limit exceeds what the org's
    allocation allows; enforced by the admission engine together with the org's limits."""
    errors = {f"slice_{name}": ["Must be at least 1."]
              for name, value in asdict(key_slice).items() if value is not None and value < 1}
    if default_service_tier not in ServiceTier.values:
        errors["default_service_tier"] = [f"Must be one of: {', '.join(ServiceTier.values)}."]
    errors |= queue_default_errors("queue_threshold_default_ms", queue_threshold_default_ms)
    if errors:
        raise DomainError("The key's limits are invalid.", code="invalid_key_limits",
                          fields=errors)
    # The house lock order: the org, then its rows.
    Organization.objects.select_for_update().get(pk=key.org_id)
    key = ApiKey.objects.select_for_update().get(pk=key.pk)
    if key.revoked_at is not None:
        raise Conflict("This API key is revoked.", code="already_revoked")
    api_key_slice_checking.emit(key=key, key_slice=key_slice)
    before = _slice_of(key)
    key.slice_output_tps, key.slice_input_tps = key_slice.output_tps, key_slice.input_tps
    key.slice_daily_tokens = key_slice.daily_tokens
    key.slice_max_concurrency = key_slice.max_concurrency
    key.default_service_tier = default_service_tier
    key.queue_threshold_default_ms = queue_threshold_default_ms
    key.save(update_fields=["slice_output_tps", "slice_input_tps", "slice_daily_tokens",
                            "slice_max_concurrency", "default_service_tier",
                            "queue_threshold_default_ms"])
    audit_record(actor=actor, action="api_key.limits_set", target=key, org=key.org,
                 before=before, after=_slice_of(key))
    api_keys_changed.emit(org_id=key.org_id)
    return key


# Writing last_used_at on every request would put the database on the hot path; a key's last use
# is recorded at most once a minute, from usage ingestion.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def api_key_touch(*, key_ids: list[int], at: datetime) -> int:
    """Conditional update: rows already touched within the resolution are not rewritten."""
    stale = Q(last_used_at__isnull=True) | Q(last_used_at__lt=at - LAST_USED_RESOLUTION)
    # The rows are locked in primary-key order (the sub-select's FOR UPDATE), whatever plan the
    # UPDATE gets: usage batches touch keys inside their transaction, and two touching the same
    # keys in different orders would deadlock. Still one statement.
    locked = (ApiKey.objects.filter(stale, pk__in=key_ids).order_by("pk").select_for_update()
              .values("pk"))
    return ApiKey.objects.filter(stale, pk__in=locked).update(last_used_at=at)
