"""Refusals by code, per org, pool, API key and UTC minute, for the Usage API.

The hook counts them in Redis (quotas/hook/refusals.py). Beat drains every minute that is at
least `DRAIN_AFTER` old into PostgreSQL (`RefusalMinute`) with SET semantics: the row takes the
hash's full count, so a drain that runs twice, or dies before it forgets the minute, writes the
same numbers again.
"""

from datetime import UTC, datetime, timedelta

from django.db import transaction

from metering.events import refusals_drained
from metering.models import RefusalMinute
from quotas.hook.refusals import HASH_KEY, MINUTES_KEY, refusal_minute
from quotas.limiter.clock import clock
from quotas.limiter.connection import limiter_client

# A minute is drained once it is this old: the hook counts within milliseconds of deciding, so
# nothing can still arrive for it.
DRAIN_AFTER = timedelta(minutes=2)


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
    for member in client.zrangebyscore(MINUTES_KEY, "-inf", refusal_minute(now - DRAIN_AFTER)):
        minute = int(member)
        rows = _rows(minute, client.hgetall(HASH_KEY.format(minute=minute)))
        with transaction.atomic(durable=True):
            RefusalMinute.objects.bulk_create(
                rows, update_conflicts=True, update_fields=["count"],
                unique_fields=["org", "pool", "api_key", "minute", "code"])
            refusals_drained.emit(minute=datetime.fromtimestamp(minute, tz=UTC), rows=rows)
        client.zrem(MINUTES_KEY, member)
        written += len(rows)
    return written
