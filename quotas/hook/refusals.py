"""Refusals counted by org, pool, API key and code, per UTC minute, in Redis.

The admission script does not count refusals (it decides, and stays as small as it is). The
hook, once it has a decision, adds one to a Redis hash per UTC minute: one pipelined round
trip, only on refusals, errors swallowed, because a statistic must never fail or slow a
decision. Metering drains the minutes into PostgreSQL for the Usage API (metering/refusals.py);
hashes expire after a day, so Redis never keeps more than a day of them even if nobody drains.

Refusals that name no org (`invalid_api_key`, `unknown_model`, malformed input) are not counted:
there is nobody to show them to.
"""

import logging
from datetime import datetime

import redis

from quotas.limiter.clock import clock
from quotas.limiter.connection import limiter_client
from quotas.limiter.schema import Decision

logger = logging.getLogger(__name__)

MINUTES_KEY = "sluice:refusals:minutes"  # sorted set: minute (epoch seconds) -> same
HASH_KEY = "sluice:refusals:{minute}"  # hash: "<org>:<pool>:<key or ->:<code>" -> count
KEEP_SECONDS = 86_400


def refusal_minute(at: datetime) -> int:
    return int(at.timestamp()) // 60 * 60


def refusal_counted(*, decision: Decision, limiter: str) -> bool:
    """Whether refusal_count counts this decision: refusals of a known org. Decisions taken
    without Redis (`limiter` "fail_open") are not: Redis is down, and trying would add its
    timeout to every refusal."""
    return not decision.allowed and decision.org_id is not None and limiter == "redis"


def refusal_count(*, decision: Decision, pool_id: int, limiter: str) -> None:
    """Called by the hook after every decision (refusal_counted says which count)."""
    if not refusal_counted(decision=decision, limiter=limiter):
        return
    minute = refusal_minute(clock.now())
    key = HASH_KEY.format(minute=minute)
    field = f"{decision.org_id}:{pool_id}:{decision.api_key_id or '-'}:{decision.outcome}"
    try:
        pipe = limiter_client().pipeline(transaction=False)
        pipe.hincrby(key, field, 1)
        pipe.expire(key, KEEP_SECONDS)
        pipe.zadd(MINUTES_KEY, {str(minute): minute})
        pipe.execute()
    except redis.RedisError as exc:
        logger.warning("refusal not counted: %s", exc)
