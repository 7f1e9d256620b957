"""Celery tasks: thin wrappers that take ids, call one service, and are safe to run twice."""

from celery import shared_task

from rollout.waves import pool_auto_admit as pool_auto_admit_service
from rollout.waves import waves_close_due, waves_open_due


@shared_task
def waves_advance() -> dict:
    """Beat, every minute: open the waves that are due, close the ones that have ended."""
    return {"opened": waves_open_due(), "closed": waves_close_due()}


@shared_task
def pool_auto_admit(*, pool_id: int) -> int:
    return len(pool_auto_admit_service(pool_id=pool_id))
