"""Thin Celery wrappers around quotas services; safe to run twice."""

from celery import shared_task

from quotas.waves import pool_auto_admit as pool_auto_admit_service
from quotas.waves import waves_open_due as waves_open_due_service


@shared_task
def waves_open_due() -> int:
    return waves_open_due_service()


@shared_task
def pool_auto_admit(*, pool_id: int) -> int:
    return len(pool_auto_admit_service(pool_id=pool_id))
