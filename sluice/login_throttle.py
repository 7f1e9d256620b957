"""Brute-force protection for every password form (portal and console sign-in).

Three Redis counters of failures, each in a window that starts at its first failure:

- per (account, client address): after MAX_FAILURES the pair is locked until the window ends.
  Keyed on the pair, so an attacker locks out only themselves, never the account's owner
  elsewhere. A full success clears it.
- per client address, across accounts: after IP_MAX_FAILURES the address is locked for every
  account. It stops password spraying (one password tried on many accounts, each pair under
  its limit). A success never clears it, so an account the attacker owns cannot reset it.
- per account, across addresses: the slower brake on guessing from many addresses. After
  ACCOUNT_BRAKE_FAILURES only browsers that signed in to that account before (a signed cookie
  set at each success, `device_remember`) may keep trying; nobody is locked out from the
  browser they use, so nobody on the internet can lock an operator out.

The client address is the one sluice/client_address.py settled on (behind trusted proxies,
the forwarded client, never the load balancer). Keys hash usernames and addresses and expire
by themselves: no clean-up job.
"""

import hashlib
import logging
from dataclasses import dataclass

import redis
from django.conf import settings
from django.core import signing

logger = logging.getLogger(__name__)

MAX_FAILURES = 5
# Per address: high enough for an office behind one NAT address, low enough that spraying
# gets a few dozen guesses per window instead of unlimited ones.
IP_MAX_FAILURES = 30
# Per account, from anywhere: far above what a person mistyping makes, far below what a
# botnet needs.
ACCOUNT_BRAKE_FAILURES = 20
WINDOW_SECONDS = 15 * 60

DEVICE_COOKIE = "sluice_signed_in_before"
DEVICE_COOKIE_MAX_AGE = 180 * 24 * 3600
DEVICE_COOKIE_ACCOUNTS = 10  # accounts remembered per browser
_DEVICE_SALT = "sluice.login_throttle.device"

_client: redis.Redis | None = None

# INCR every counter, and start each window on its first failure only. A script rather than
# EXPIRE's NX flag, which needs Redis 7 (the embedded development Redis is 6.2).
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


def _hash(text: str) -> str:
    # Hashed: usernames are email addresses and do not belong in Redis key listings.
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _account(username: str) -> str:
    return username.strip().lower()


def _keys(*, username: str, ip: str) -> tuple[str, str, str]:
    """(pair, address, account)."""
    account = _account(username)
    return (f"login-failures:{_hash(f'{account}|{ip}')}",
            f"login-failures-ip:{_hash(f'ip|{ip}')}",
            f"login-failures-account:{_hash(f'account|{account}')}")


@dataclass(frozen=True)
class LoginLock:
    locked: bool
    retry_after_seconds: int = 0
    # "pair" or "address" (this client is locked), "account" (unknown browsers are).
    reason: str = ""


def login_lock_status(*, username: str, ip: str, known_device: bool = False) -> LoginLock:
    keys = _keys(username=username, ip=ip)
    try:
        pipe = _redis().pipeline()
        for key in keys:
            pipe.get(key)
            pipe.ttl(key)
        pair, pair_ttl, address, address_ttl, account, account_ttl = pipe.execute()
    except redis.RedisError:
        # Fail open: a Redis outage must not lock every user out of sign-in. Passwords are still
        # checked, and operators still need their second factor.
        logger.warning("login throttle unavailable; sign-in is not rate limited", exc_info=True)
        return LoginLock(locked=False)
    limits = [(pair, pair_ttl, MAX_FAILURES, "pair"),
              (address, address_ttl, IP_MAX_FAILURES, "address")]
    if not known_device:
        limits.append((account, account_ttl, ACCOUNT_BRAKE_FAILURES, "account"))
    hits = [(max(int(ttl), 1), reason) for count, ttl, limit, reason in limits
            if count is not None and int(count) >= limit]
    if hits:
        wait, reason = max(hits)
        return LoginLock(locked=True, retry_after_seconds=wait, reason=reason)
    return LoginLock(locked=False)


def login_failure_record(*, username: str, ip: str) -> int:
    """Counts one failure for the pair, the address and the account; each window starts at
    its first failure and is not extended. Returns the pair's count."""
    try:
        failures, _address, _account_count = _redis().register_script(_COUNT_FAILURE)(
            keys=list(_keys(username=username, ip=ip)), args=[WINDOW_SECONDS])
    except redis.RedisError:
        logger.warning("login throttle unavailable; failure not counted", exc_info=True)
        return 0
    return int(failures)


def login_failures_clear(*, username: str, ip: str) -> None:
    try:
        _redis().delete(_keys(username=username, ip=ip)[0])
    except redis.RedisError:
        logger.warning("login throttle unavailable; failures not cleared", exc_info=True)


def _device_accounts(request) -> list[str]:
    value = request.COOKIES.get(DEVICE_COOKIE, "") if request is not None else ""
    try:
        accounts = signing.loads(value, salt=_DEVICE_SALT, max_age=DEVICE_COOKIE_MAX_AGE)
    except signing.BadSignature:
        return []
    return accounts if isinstance(accounts, list) else []


def device_known(*, request, username: str) -> bool:
    """Whether this browser signed in to `username` before (within the cookie's life)."""
    return _hash(_account(username)) in _device_accounts(request)


def device_remember(*, request, response, username: str) -> None:
    """After a full sign-in: this browser may keep trying this account under the brake."""
    account = _hash(_account(username))
    accounts = [a for a in _device_accounts(request) if a != account] + [account]
    response.set_cookie(
        DEVICE_COOKIE, signing.dumps(accounts[-DEVICE_COOKIE_ACCOUNTS:], salt=_DEVICE_SALT),
        max_age=DEVICE_COOKIE_MAX_AGE, httponly=True, samesite="Lax",
        secure=settings.SESSION_COOKIE_SECURE)
