"""Refusals by code, per org, pool, API key and UTC minute, for the Usage API.

The admission script does not count refusals (it decides, and stays as small as it is). The
gateway hook, once it has a decision, adds one to a Redis hash per UTC minute
(`refusal_count`: one pipelined round trip, only on refusals, errors swallowed: a statistic must
never fail or slow a decision). Beat drains every minute that is at least `DRAIN_AFTER` old into
PostgreSQL (`RefusalMinute`) with SET semantics: the row takes the hash's full count, so a drain
that runs twice, or dies before it forgets the minute, writes the same numbers again. Hashes
expire after a day, so Redis never keeps more than a day of them even if beat stops.

Refusals that name no org (`invalid_api_key`, `unknown_model`, malformed input) are not counted:
there is nobody to show them to.
"""

import logging
from datetime import UTC, datetime, timedelta

import redis
from django.db import transaction

from quotas.limiter.clock import clock
from quotas.limiter.connection import limiter_client
from quotas.limiter.schema import Decision
from quotas.models import RefusalMinute

logger = logging.getLogger(__name__)

MINUTES_KEY = "sluice:refusals:minutes"  # sorted set: minute (epoch seconds) -> same
HASH_KEY = "sluice:refusals:{minute}"  # hash: "<org>:<pool>:<key or ->:<code>" -> count
KEEP_SECONDS = 86_400
# A minute is drained once it is this old: the hook counts within milliseconds of deciding, so
# nothing can still arrive for it.
DRAIN_AFTER = timedelta(minutes=2)


def _minute(at: datetime) -> int:
    return int(at.timestamp()) // 60 * 60


def refusal_counted(*, decision: Decision, limiter: str) -> bool:
    """Whether refusal_count counts this decision: refusals of a known org. Decisions taken
    without Redis (`limiter` "fail_open") are not: Redis is down, and trying would add its
    timeout to every refusal."""
    return not decision.allowed and decision.org_id is not None and limiter == "redis"


def refusal_count(*, decision: Decision, pool_id: int, limiter: str) -> None:
    """Called by the gateway hook after every decision (refusal_counted says which count)."""
    if not refusal_counted(decision=decision, limiter=limiter):
        return
    minute = _minute(clock.now())
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


def _rows(minute: int, counts: dict[str, str]) -> list[RefusalMinute]:
    at = datetime.fromtimestamp(minute, tz=UTC)
    rows = []
    for field, count in counts.items():
        org_id, pool_id, key_id, code = field.split(":", 3)
        rows.append(RefusalMinute(org_id=int(org_id), pool_id=int(pool_id),
                                  api_key_id=None if key_id == "-" else int(key_id),
                                  minute=at, code=code, count=int(count)))
    return rows


def refusals_drain(*, now: datetime | None = None) -> int:
    """Beat: move every minute old enough into PostgreSQL. Returns the rows written."""
    now = now or clock.now()
    client = limiter_client(bulk=True)
    written = 0
    for member in client.zrangebyscore(MINUTES_KEY, "-inf", _minute(now - DRAIN_AFTER)):
        minute = int(member)
        rows = _rows(minute, client.hgetall(HASH_KEY.format(minute=minute)))
        with transaction.atomic(durable=True):
            RefusalMinute.objects.bulk_create(
                rows, update_conflicts=True, update_fields=["count"],
                unique_fields=["org", "pool", "api_key", "minute", "code"])
        client.zrem(MINUTES_KEY, member)
        written += len(rows)
    return written
