"""Celery tasks: thin wrappers that take ids, call one service, and are safe to run twice."""

from celery import shared_task

from quotas.bookings import bookings_advance as bookings_advance_service
from quotas.limiter.connection import LimiterUnavailable
from quotas.publish import (
    gateway_tokens_publish,
    limiter_sync_all,
    limits_publish_orgs,
    limits_publish_pools,
)
from quotas.services import allocations_expire as allocations_expire_service


@shared_task(autoretry_for=(LimiterUnavailable,), retry_backoff=True, retry_backoff_max=60,
             max_retries=20)
def limits_publish_org(*, org_id: int) -> int:
    return limits_publish_orgs(org_ids=[org_id])


@shared_task(autoretry_for=(LimiterUnavailable,), retry_backoff=True, retry_backoff_max=60,
             max_retries=20)
def limits_publish_pool(*, pool_id: int) -> None:
    limits_publish_pools(pool_ids=[pool_id])


@shared_task(autoretry_for=(LimiterUnavailable,), retry_backoff=True, retry_backoff_max=60,
             max_retries=20)
def gateway_tokens_publish_task() -> int:
    return len(gateway_tokens_publish())


@shared_task
def limiter_sync() -> dict[int, int]:
    """Beat: rebuild every pool and the gateway tokens, so a publish lost while Redis and the
    broker were both down is repaired within one period. Counters and buckets are left
    alone."""
    return limiter_sync_all()


@shared_task
def allocations_expire() -> int:
    """Beat: end allocations past their valid_until (their capacity already stopped counting
    at that moment; this records it, audits it and republishes the org's limits)."""
    return allocations_expire_service()


@shared_task
def bookings_advance() -> int:
    """Beat: record the bookings whose window began or ended (state, webhooks) and republish
    their orgs, so the limiter holds the next change of their limits."""
    return bookings_advance_service()
