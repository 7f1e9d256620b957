"""Celery tasks: thin, take ids, safe to run twice."""

from celery import shared_task

from webhooks.delivery import webhook_deliver, webhooks_drain
from webhooks.producers import waitlist_positions_announce


@shared_task
def webhook_deliver_task(delivery_id: int) -> str:
    return webhook_deliver(delivery_id=delivery_id)


@shared_task
def webhooks_drain_task() -> dict:
    return webhooks_drain()


@shared_task
def waitlist_positions_task() -> int:
    return waitlist_positions_announce()
