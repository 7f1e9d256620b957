"""Gateway tokens: the credential a gateway presents on the hook API (`Bearer gw_...`).

Created by an operator (admin action or `manage.py gateway_token_create`), shown once, stored as
a SHA-256 digest, revocable.

Verification runs on every hook call and must not need PostgreSQL: authorize keeps answering
through a PostgreSQL outage. Every create and revoke publishes the usable tokens to Redis after
its commit (quotas/publish.py; limiter_sync republishes them), and each process re-reads that
set every REFRESH_SECONDS, so a revocation takes effect within about that. When Redis cannot
answer, the set is read from PostgreSQL instead; when neither can, the last one read stays in
force. A token the set does not hold is looked up within the bounds of
quotas/hook/gateway_token_misses.py: a guess costs no PostgreSQL query, a new token works at once.
When a token was last used is recorded in Redis and copied into PostgreSQL by limiter_sync.
"""

import contextlib
import threading
import time
from dataclasses import dataclass

from django.db import DatabaseError, transaction
from django.utils import timezone

from orgs.services.audit import Actor, audit_record
from quotas.hook.gateway_token_misses import UnknownTokens
from quotas.limiter.connection import LimiterUnavailable
from quotas.limiter.gateway_tokens import (
    gateway_tokens_read,
    gateway_tokens_used_record,
    gateway_tokens_write,
)
from quotas.limiter.steps import Background, Blocking, Claim, Steps
from quotas.models import GatewayToken
from quotas.publish import gateway_tokens_publish_later, gateway_tokens_usable
from sluice.errors import Conflict, DomainError
from sluice.secrets import secret_digest, secret_issue, secret_parse_lookup
from sluice.transactions import nestable

GATEWAY_TOKEN_KIND = "gw"  # noqa: S105 - a prefix, not a secret
REFRESH_SECONDS = 0.5
# When a token was last used is recorded at most this often per token and process.
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
    gateway_tokens_publish_later()
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
    gateway_tokens_publish_later()
    return token


@dataclass(frozen=True)
class GatewayIdentity:
    token_id: int
    name: str


def _identity(entry: str) -> GatewayIdentity:
    token_id, _, name = entry.partition(":")
    return GatewayIdentity(token_id=int(token_id), name=name)


def _tokens_load() -> dict[str, str] | None:
    """The usable tokens: from Redis; from PostgreSQL when Redis lost them (written back) or
    cannot answer. None when neither can."""
    try:
        tokens = gateway_tokens_read()
        redis_up = True
    except LimiterUnavailable:
        tokens, redis_up = None, False
    if tokens is not None:
        return tokens
    try:
        tokens = gateway_tokens_usable()
    except DatabaseError:
        return None
    if redis_up:
        # Else this process has them, and limiter_sync writes them back later.
        with contextlib.suppress(LimiterUnavailable):
            gateway_tokens_write(tokens)
    return tokens


class _Known:
    """The tokens this process accepts, refreshed by whichever request finds them stale (the
    others go on with the current set meanwhile)."""

    def __init__(self) -> None:
        self.by_digest: dict[str, GatewayIdentity] | None = None
        self.fresh_until = float("-inf")
        self.refresh = Claim()
        self.unknown = UnknownTokens()  # what a token the set does not hold may cost
        self.used: dict[int, int] = {}  # token id -> last use (epoch s), not yet recorded
        self.recorded: dict[int, int] = {}  # token id -> last use recorded in Redis
        self.lock = threading.Lock()

    def stale(self) -> bool:
        return self.by_digest is None or time.monotonic() >= self.fresh_until

    def current(self) -> dict[str, GatewayIdentity]:
        # The first load blocks every caller; a refresh only the one that takes it.
        if self.stale() and self.lock.acquire(blocking=self.by_digest is None):
            try:
                if self.stale():
                    self._refresh()
            finally:
                self.lock.release()
        return self.by_digest or {}

    def _refresh(self) -> None:
        tokens = _tokens_load()
        if tokens is not None:
            self.by_digest = {d: _identity(e) for d, e in tokens.items()}
        self.fresh_until = time.monotonic() + REFRESH_SECONDS
        due = {k: at for k, at in self.used.items()
               if at - self.recorded.get(k, 0) >= TOUCH_EVERY_SECONDS}
        if due:
            with contextlib.suppress(LimiterUnavailable):  # else at a later refresh
                gateway_tokens_used_record(due)
                self.recorded.update(due)

    def missed(self, digest: str) -> bool:
        """Refused without a lookup (quotas/hook/gateway_token_misses.py)."""
        return self.unknown.refused_from_memory(digest)

    def miss(self, plaintext: str, digest: str) -> GatewayIdentity | None:
        if secret_parse_lookup(plaintext, kind=GATEWAY_TOKEN_KIND) is None:
            return None  # not even shaped like a token
        entry = self.unknown.resolve(digest)
        if entry is None:
            return None
        identity = _identity(entry)
        if self.by_digest is not None:
            self.by_digest[digest] = identity
        return identity


_known = _Known()


def _presented(authorization: str) -> tuple[str, str] | None:
    """(plaintext, digest) of the token in an `Authorization` header value, or None. The last
    one is remembered: a gateway sends the same header on every call."""
    global _last_presented
    last = _last_presented
    if last[0] == authorization:
        return last[1]
    if not authorization.startswith("Bearer gw_"):
        return None
    plaintext = authorization[7:].strip()
    presented = plaintext, secret_digest(plaintext)
    _last_presented = (authorization, presented)
    return presented


_last_presented: tuple[str, tuple[str, str] | None] = ("", None)


def _used(identity: GatewayIdentity | None) -> GatewayIdentity | None:
    if identity is not None:
        _known.used[identity.token_id] = int(time.time())
    return identity


def gateway_authenticate(authorization: str) -> GatewayIdentity | None:
    """The gateway behind an `Authorization` header value, or None. May read Redis or
    PostgreSQL (a stale set, an unknown token)."""
    presented = _presented(authorization)
    if presented is None:
        return None
    plaintext, digest = presented
    return _used(_known.current().get(digest) or _known.miss(plaintext, digest))


def gateway_authenticate_steps(authorization: str) -> Steps:
    """gateway_authenticate as steps (quotas/limiter/steps.py): answered from the set in
    memory when it holds the answer; a stale set is refreshed in the background meanwhile, and
    only a first load or an unknown token waits (in a thread) for Redis or PostgreSQL."""
    presented = _presented(authorization)
    if presented is None:
        return None
    known = _known
    if known.by_digest is not None:
        if known.stale() and known.refresh.take(known.fresh_until):
            yield Background(known.current, {})
        identity = known.by_digest.get(presented[1])
        if identity is not None:
            return _used(identity)
        if known.missed(presented[1]):
            return None
    return (yield Blocking(gateway_authenticate, {"authorization": authorization}))


def gateway_token_cache_clear() -> None:
    """Forget the tokens read (tests): the next call reads them again."""
    global _known
    _known = _Known()
