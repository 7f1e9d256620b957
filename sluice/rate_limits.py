"""Rate limits on the forms anyone may send before signing in (sign-up, password reset):
a Redis counter per (scope, identity) in a fixed window that starts at the first event.

Rates come from settings as `Rate` (config/env.py's `env_rate` parses "10/hour"). A Redis
outage fails open, like the sign-in throttle: the forms keep working unthrottled rather than
refusing everyone, and the outage is logged.
"""

import hashlib
import logging
from dataclasses import dataclass

import redis
from django.conf import settings

logger = logging.getLogger(__name__)

UNITS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}

# INCR, start the window on the first event only; answer the count and the window's rest.
_COUNT = """
local count = redis.call('INCR', KEYS[1])
if count == 1 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end
return {count, redis.call('TTL', KEYS[1])}
"""

_client: redis.Redis | None = None


@dataclass(frozen=True)
class Rate:
    count: int
    seconds: int

    @classmethod
    def parse(cls, text: str) -> "Rate":
        """`<count>/<second|minute|hour|day>`, count at least 1; ValueError otherwise."""
        count, sep, unit = text.strip().partition("/")
        if not sep or unit.strip() not in UNITS or not count.strip().isdigit() \
                or int(count) < 1:
            raise ValueError(f"{text!r} is not a rate like 10/hour "
                             f"(units: {', '.join(UNITS)})")
        return cls(count=int(count), seconds=UNITS[unit.strip()])

    def __str__(self) -> str:
        unit = next(name for name, seconds in UNITS.items() if seconds == self.seconds)
        return f"{self.count}/{unit}"


def _redis() -> redis.Redis:
    global _client
    if _client is None:
        _client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=1)
    return _client


def rate_limit_spend(*, scope: str, identity: str, rate: Rate) -> int:
    """Counts one event of `identity` (hashed: an address or an email) in `scope`. Returns 0
    while within `rate`, else the seconds until the window ends."""
    digest = hashlib.sha256(f"{scope}|{identity.strip().lower()}".encode()).hexdigest()[:32]
    try:
        count, ttl = _redis().register_script(_COUNT)(keys=[f"rate:{scope}:{digest}"],
                                                      args=[rate.seconds])
    except redis.RedisError:
        logger.warning("rate limit %s unavailable; not limited", scope, exc_info=True)
        return 0
    return max(int(ttl), 1) if int(count) > rate.count else 0
