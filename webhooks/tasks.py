"""Celery tasks: thin, take ids, safe to run twice. Each has time limits: a delivery attempt
is bounded by its deadline (webhooks/posting.py), a turn at an endpoint by
ENDPOINT_TURN_SECONDS plus one deadline; the limits are a margin above those, so a worker
stuck anywhere else (a database that hangs) is still freed."""

from datetime import datetime

from celery import shared_task
from django.conf import settings

from webhooks.delivery import (
    ENDPOINT_TURN_SECONDS,
    webhook_deliver,
    webhook_endpoint_deliver,
    webhooks_drain,
)
from webhooks.producers import waitlist_positions_announce

_ATTEMPT = settings.WEBHOOK_DEADLINE_SECONDS + 15
_TURN = ENDPOINT_TURN_SECONDS + _ATTEMPT


@shared_task(soft_time_limit=_ATTEMPT, time_limit=_ATTEMPT + 15)
def webhook_deliver_task(delivery_id: int) -> str:
    return webhook_deliver(delivery_id=delivery_id)


@shared_task(soft_time_limit=_TURN, time_limit=_TURN + 15)
def webhook_endpoint_deliver_task(endpoint_id: int, now: str | None = None) -> dict:
    turn = webhook_endpoint_deliver(endpoint_id=endpoint_id,
                                    now=datetime.fromisoformat(now) if now else None)
    if turn.more:
        webhook_endpoint_deliver_task.delay(endpoint_id)
    return turn.counts


@shared_task(soft_time_limit=60, time_limit=90)
def webhooks_drain_task() -> int:
    return webhooks_drain()


@shared_task(soft_time_limit=240, time_limit=270)
def waitlist_positions_task() -> int:
    return waitlist_positions_announce()
