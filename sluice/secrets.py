"""Prefixed secrets (API keys, gateway and operator tokens), shown once and stored as a hash.

Format: `<kind>_<lookup>_<secret>`. `lookup` is a short random id stored in clear and indexed, so
verification is one indexed query followed by a constant-time comparison of SHA-256 digests.
SHA-256 (not a slow password hash) is right here: the secret has 256 bits of entropy, so there is
nothing to brute-force, and authorize must stay fast.

No Django imports: the admission engine hashes the presented API key with `secret_digest` too.
"""

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass

LOOKUP_LENGTH = 12


@dataclass(frozen=True)
class IssuedSecret:
    plaintext: str  # returned to the caller once, never stored
    lookup: str
    digest: str


def secret_digest(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode()).hexdigest()


def secret_issue(*, kind: str) -> IssuedSecret:
    lookup = secrets.token_hex(LOOKUP_LENGTH // 2)
    plaintext = f"{kind}_{lookup}_{secrets.token_urlsafe(32)}"
    return IssuedSecret(plaintext=plaintext, lookup=lookup, digest=secret_digest(plaintext))


def secret_derive(*, kind: str, lookup: str, key: str) -> str:
    """The secret `<kind>_<lookup>_<...>` whose random part is an HMAC of the lookup under a
    server key. For a secret that must be shown again later (an invitation emailed after the
    commit) without being stored: the database keeps its digest, and only a holder of `key`
    can make it again."""
    mac = hmac.digest(key.encode(), f"sluice.derived:{kind}:{lookup}".encode(), "sha256")
    return f"{kind}_{lookup}_{base64.urlsafe_b64encode(mac).decode().rstrip('=')}"


def secret_issue_derived(*, kind: str, key: str) -> IssuedSecret:
    lookup = secrets.token_hex(LOOKUP_LENGTH // 2)
    plaintext = secret_derive(kind=kind, lookup=lookup, key=key)
    return IssuedSecret(plaintext=plaintext, lookup=lookup, digest=secret_digest(plaintext))


def secret_parse_lookup(plaintext: str, *, kind: str) -> str | None:
    """The lookup of a `<kind>_<lookup>_<secret>`, or None. A kind may itself contain "_"
    (`sk_admin`): an inference key `sk_...` never parses as an admin key, nor the reverse,
    because the lookup has a fixed length of hex digits."""
    if not plaintext.startswith(f"{kind}_"):
        return None
    lookup, sep, _ = plaintext[len(kind) + 1:].partition("_")
    if not sep or len(lookup) != LOOKUP_LENGTH:
        return None
    return lookup


def secret_matches(plaintext: str, digest: str) -> bool:
    return hmac.compare_digest(secret_digest(plaintext), digest)
