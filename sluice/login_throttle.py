"""Brute-force protection for every password form (portal and console sign-in).

A Redis counter per (username, client IP): after MAX_FAILURES failures within WINDOW_SECONDS the
pair is locked until the window runs out. Keyed on the pair rather than the username alone so an
attacker cannot lock a victim out from elsewhere; TOTP protects operator accounts on top of this.
The counter key expires by itself, so a lockout needs no clean-up job.
"""

import hashlib
import logging
from dataclasses import dataclass

import redis
from django.conf import settings

logger = logging.getLogger(__name__)

MAX_FAILURES = 5
WINDOW_SECONDS = 15 * 60

_client: redis.Redis | None = None

# INCR, and start the window on the first failure only. A script rather than EXPIRE's NX flag,
# which needs Redis 7 (the embedded development Redis is 6.2).
_COUNT_FAILURE = """
local failures = redis.call('INCR', KEYS[1])
if failures == 1 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end
return failures
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


@dataclass(frozen=True)
class LoginLock:
    locked: bool
    retry_after_seconds: int = 0


def login_lock_status(*, username: str, ip: str) -> LoginLock:
    try:
        pipe = _redis().pipeline()
        pipe.get(_key(username=username, ip=ip))
        pipe.ttl(_key(username=username, ip=ip))
        failures, ttl = pipe.execute()
    except redis.RedisError:
        # Fail open: a Redis outage must not lock every user out of sign-in. Passwords are still
        # checked, and operators still need their second factor.
        logger.warning("login throttle unavailable; sign-in is not rate limited", exc_info=True)
        return LoginLock(locked=False)
    if failures is not None and int(failures) >= MAX_FAILURES:
        return LoginLock(locked=True, retry_after_seconds=max(int(ttl), 1))
    return LoginLock(locked=False)


def login_failure_record(*, username: str, ip: str) -> int:
    """Counts one failure; the window starts at the first failure and is not extended."""
    key = _key(username=username, ip=ip)
    try:
        failures = _redis().register_script(_COUNT_FAILURE)(keys=[key], args=[WINDOW_SECONDS])
    except redis.RedisError:
        logger.warning("login throttle unavailable; failure not counted", exc_info=True)
        return 0
    return int(failures)


def login_failures_clear(*, username: str, ip: str) -> None:
    try:
        _redis().delete(_key(username=username, ip=ip))
    except redis.RedisError:
        logger.warning("login throttle unavailable; failures not cleared", exc_info=True)
