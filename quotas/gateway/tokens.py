"""Gateway tokens: the credential a gateway presents on the hook API (`Bearer gw_...`).

Created by an operator (admin action or `manage.py gateway_token_create`), shown once, stored as
a SHA-256 digest, revocable. Verification runs on every authorize call, so a verified token is
remembered by the process for CACHE_SECONDS: a revocation takes effect within that time.
"""

import threading
import time
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from orgs.services.audit import Actor, audit_record
from quotas.models import GatewayToken
from sluice.errors import Conflict, DomainError
from sluice.secrets import secret_digest, secret_issue, secret_matches, secret_parse_lookup
from sluice.transactions import nestable

GATEWAY_TOKEN_KIND = "gw"  # noqa: S105 - a prefix, not a secret
CACHE_SECONDS = 10.0
# last_used_at is written at most this often per token and process.
TOUCH_EVERY_SECONDS = 60


@nestable
@transaction.atomic(durable=True)
def gateway_token_create(*, name: str, actor: Actor) -> tuple[GatewayToken, str]:
    name = name.strip()
    if not name:
        raise DomainError("A gateway token needs a name.", code="invalid_name")
    issued = secret_issue(kind=GATEWAY_TOKEN_KIND)
    token = GatewayToken.objects.create(
        name=name, lookup=issued.lookup, digest=issued.digest,
        created_by=actor if not isinstance(actor, str) and actor is not None else None,
    )
    audit_record(actor=actor, action="gateway_token.create", target=token,
                 after={"name": name, "prefix": f"gw_{issued.lookup}"})
    return token, issued.plaintext


@transaction.atomic(durable=True)
def gateway_token_revoke(*, token: GatewayToken, actor: Actor, reason: str = "") -> GatewayToken:
    token = GatewayToken.objects.select_for_update().get(pk=token.pk)
    if token.revoked_at is not None:
        raise Conflict("This gateway token is already revoked.", code="already_revoked")
    token.revoked_at = timezone.now()
    token.save(update_fields=["revoked_at"])
    audit_record(actor=actor, action="gateway_token.revoke", target=token, reason=reason,
                 after={"revoked_at": token.revoked_at.isoformat()})
    return token


@dataclass(frozen=True)
class GatewayIdentity:
    token_id: int
    name: str


_cache: dict[str, tuple[GatewayIdentity, float]] = {}
_cache_lock = threading.Lock()


def _verify(plaintext: str) -> GatewayIdentity | None:
    lookup = secret_parse_lookup(plaintext, kind=GATEWAY_TOKEN_KIND)
    row = GatewayToken.objects.filter(lookup=lookup).first() if lookup else None
    if row is None or row.revoked_at is not None or not secret_matches(plaintext, row.digest):
        return None
    now = timezone.now()
    if row.last_used_at is None or (now - row.last_used_at).total_seconds() > TOUCH_EVERY_SECONDS:
        GatewayToken.objects.filter(pk=row.pk).update(last_used_at=now)
    return GatewayIdentity(token_id=row.pk, name=row.name)


def gateway_authenticate(authorization: str) -> GatewayIdentity | None:
    """The gateway behind an `Authorization` header value, or None."""
    if not authorization.startswith("Bearer gw_"):
        return None
    plaintext = authorization[7:].strip()
    digest = secret_digest(plaintext)
    hit = _cache.get(digest)
    if hit is not None and hit[1] > time.monotonic():
        return hit[0]
    identity = _verify(plaintext)
    with _cache_lock:
        if identity is None:
            _cache.pop(digest, None)
        else:
            _cache[digest] = (identity, time.monotonic() + CACHE_SECONDS)
    return identity


def gateway_token_cache_clear() -> None:
    with _cache_lock:
        _cache.clear()
