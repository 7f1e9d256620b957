"""Secrets Sluice must use again, not only check: sealed at rest.

A webhook endpoint's signing secret signs every delivery, so it cannot be stored as a hash like
API keys and tokens (sluice/secrets.py). It is sealed instead: Fernet (AES-128-CBC with
HMAC-SHA256, from `cryptography`) under a key derived from SLUICE_SECRET_KEY for one purpose,
so a copy of the database alone reveals no secret. Each purpose has its own key: a value sealed
for one cannot be opened as another.

Rotating SLUICE_SECRET_KEY: put the new key in SLUICE_SECRET_KEY and the old one in
SLUICE_SECRET_KEY_FALLBACKS (values sealed under a fallback still open), run
`manage.py secrets_reseal` (everything sealed is sealed again under the new key), then drop
the fallback. A value whose key is gone does not open: SealBroken.
"""

import base64
import hmac
from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings


class SealBroken(Exception):
    """Sealed under a key that is neither SLUICE_SECRET_KEY nor one of its fallbacks (or not a
    sealed value at all)."""


@lru_cache(maxsize=16)
def _sealer(purpose: str, keys: tuple[str, ...]) -> MultiFernet:
    label = b"sluice.seal:" + purpose.encode()
    return MultiFernet([Fernet(base64.urlsafe_b64encode(hmac.digest(key.encode(), label, "sha256")))
                        for key in keys])


def _current(purpose: str) -> MultiFernet:
    # Read on every call (cached by value): tests and a rotation change the settings.
    return _sealer(purpose, (settings.SECRET_KEY, *settings.SECRET_KEY_FALLBACKS))


def seal(plaintext: str, *, purpose: str) -> str:
    """`plaintext` sealed under the current key (ASCII, about 2x the length plus 60)."""
    return _current(purpose).encrypt(plaintext.encode()).decode()


def unseal(sealed: str, *, purpose: str) -> str:
    return _opened(_current(purpose).decrypt, sealed, purpose)


def reseal(sealed: str, *, purpose: str) -> str:
    """The same plaintext sealed under the current key (from a fallback's, after rotation)."""
    return _opened(_current(purpose).rotate, sealed, purpose)


def _opened(open_with, sealed: str, purpose: str) -> str:
    try:
        return open_with(sealed.encode()).decode()
    except InvalidToken as exc:
        raise SealBroken(f"a sealed {purpose} does not open with SLUICE_SECRET_KEY or its "
                         "fallbacks") from exc
