"""Strict environment parsing: a typo or a malformed value raises ImproperlyConfigured.

Every setting that may come from the environment is read through one of these functions, so the
set of variables Sluice understands is exactly the set named in settings/base.py.
"""

import ipaddress
import os

from django.core.exceptions import ImproperlyConfigured

from sluice.rate_limits import Rate

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}
_MISSING = object()


def env_str(name: str, default: str | object = _MISSING) -> str:
    value = os.environ.get(name)
    if value is None:
        if default is _MISSING:
            raise ImproperlyConfigured(f"Environment variable {name} is required.")
        return default  # type: ignore[return-value]
    return value


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={value!r} is not a boolean (use 1/0, true/false).")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        parsed = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not an integer.") from None
    if minimum is not None and parsed < minimum:
        raise ImproperlyConfigured(f"{name}={parsed} must be at least {minimum}.")
    return parsed


def env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        return float(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not a number.") from None


def env_list(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name)
    if value is None:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


def env_networks(name: str, default: list[str]) -> tuple[str, ...]:
    """Comma-separated IP addresses or CIDR networks (`10.0.0.0/8`, `2001:db8::/32`). A network
    with host bits set (`10.0.0.1/8`) is refused: it is usually a typo for something else."""
    entries = env_list(name, default)
    for entry in entries:
        try:
            ipaddress.ip_network(entry)
        except ValueError:
            raise ImproperlyConfigured(
                f"{name}: {entry!r} is not an IP address or network (like 10.0.0.0/8).") from None
    return tuple(entries)


def env_rate(name: str, default: str) -> Rate:
    """A rate like `10/hour` (count per second, minute, hour or day)."""
    try:
        return Rate.parse(os.environ.get(name, default))
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}: {exc}") from None


def env_choice(name: str, default: str, choices: set[str]) -> str:
    value = os.environ.get(name, default)
    if value not in choices:
        raise ImproperlyConfigured(f"{name}={value!r} must be one of {sorted(choices)}.")
    return value


def env_reject_unknown(prefix: str, known: set[str]) -> None:
    """A misspelled SLUICE_* variable is an error, not a silently ignored setting."""
    unknown = sorted(k for k in os.environ if k.startswith(prefix) and k not in known)
    if unknown:
        raise ImproperlyConfigured(f"Unknown environment variables: {', '.join(unknown)}")
