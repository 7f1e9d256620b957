"""Celery tasks: thin wrappers that take ids, call one service, and are safe to run twice."""

from celery import shared_task

from quotas.limiter.connection import LimiterUnavailable
from quotas.limiter.sync import limiter_publish_org, limiter_sync_all


@shared_task(autoretry_for=(LimiterUnavailable,), retry_backoff=True, retry_backoff_max=60,
             max_retries=20)
def limits_publish_org(*, org_id: int) -> int:
    return limiter_publish_org(org_id=org_id)


@shared_task
def limiter_sync() -> dict[int, int]:
    """Beat: rebuild every pool, so a publish lost while Redis and the broker were both down is
    repaired within one period. Counters and buckets are left alone."""
    return limiter_sync_all()
