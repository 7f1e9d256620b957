"""Brute-force protection for every password form (portal and console sign-in).

A Redis counter per (username, client IP): after MAX_FAILURES failures within WINDOW_SECONDS the
pair is locked until the window runs out. Keyed on the pair rather than the username alone so an
attacker cannot lock a victim out from elsewhere; TOTP protects operator accounts on top of this.
A second counter per client IP, across usernames, stops password spraying (one password tried
on many accounts, each pair staying under its limit): after IP_MAX_FAILURES failures the address
is locked for every username. A success clears its pair only, never the address's count, so one
account the attacker owns cannot reset it. Counter keys expire by themselves, so a lockout needs
no clean-up job.
"""

import hashlib
import logging
from dataclasses import dataclass

import redis
from django.conf import settings

logger = logging.getLogger(__name__)

MAX_FAILURES = 5
# Per address: high enough for an office behind one NAT address, low enough that spraying
# gets a few dozen guesses per window instead of unlimited ones.
IP_MAX_FAILURES = 30
WINDOW_SECONDS = 15 * 60

_client: redis.Redis | None = None

# INCR both counters (pair, address), and start each window on its first failure only. A script
# rather than EXPIRE's NX flag, which needs Redis 7 (the embedded development Redis is 6.2).
_COUNT_FAILURE = """
local counts = {}
for i, key in ipairs(KEYS) do
  counts[i] = redis.call('INCR', key)
  if counts[i] == 1 then redis.call('EXPIRE', key, ARGV[1]) end
end
return counts
"""


def _redis() -> redis.Redis:
    global _client
    if _client is None:
        _client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=1)
    return _client


def _key(*, username: str, ip: str) -> str:
    # Hashed: usernames are email addresses and do not belong in Redis key listings.
    digest = hashlib.sha256(f"{username.strip().lower()}|{ip}".encode()).hexdigest()[:32]
    return f"login-failures:{digest}"


def _ip_key(*, ip: str) -> str:
    digest = hashlib.sha256(f"ip|{ip}".encode()).hexdigest()[:32]
    return f"login-failures-ip:{digest}"


@dataclass(frozen=True)
class LoginLock:
    locked: bool
    retry_after_seconds: int = 0


def login_lock_status(*, username: str, ip: str) -> LoginLock:
    try:
        pipe = _redis().pipeline()
        for key in (_key(username=username, ip=ip), _ip_key(ip=ip)):
            pipe.get(key)
            pipe.ttl(key)
        failures, ttl, ip_failures, ip_ttl = pipe.execute()
    except redis.RedisError:
        # Fail open: a Redis outage must not lock every user out of sign-in. Passwords are still
        # checked, and operators still need their second factor.
        logger.warning("login throttle unavailable; sign-in is not rate limited", exc_info=True)
        return LoginLock(locked=False)
    waits = [int(t) for count, t, limit in ((failures, ttl, MAX_FAILURES),
                                            (ip_failures, ip_ttl, IP_MAX_FAILURES))
             if count is not None and int(count) >= limit]
    if waits:
        return LoginLock(locked=True, retry_after_seconds=max(*waits, 1))
    return LoginLock(locked=False)


def login_failure_record(*, username: str, ip: str) -> int:
    """Counts one failure for the pair and for the address; each window starts at its first
    failure and is not extended. Returns the pair's count."""
    keys = [_key(username=username, ip=ip), _ip_key(ip=ip)]
    try:
        failures, _ip_failures = _redis().register_script(_COUNT_FAILURE)(
            keys=keys, args=[WINDOW_SECONDS])
    except redis.RedisError:
        logger.warning("login throttle unavailable; failure not counted", exc_info=True)
        return 0
    return int(failures)


def login_failures_clear(*, username: str, ip: str) -> None:
    try:
        _redis().delete(_key(username=username, ip=ip))
    except redis.RedisError:
        logger.warning("login throttle unavailable; failures not cleared", exc_info=True)
