"""Celery tasks: thin wrappers that take ids, call one service, and are safe to run twice."""

from dataclasses import asdict

from celery import shared_task
from django.utils import timezone

from metering.leases import leases_sweep as leases_sweep_service
from metering.partitions import usage_partitions_ensure
from metering.refusals import refusals_drain as refusals_drain_service
from metering.retention import usage_raw_retire
from metering.retention import usage_rollups_compact as usage_rollups_compact_service


@shared_task
def refusals_drain() -> int:
    """Beat, every minute: the hook's refusal counters into PostgreSQL (idempotent)."""
    return refusals_drain_service()


@shared_task
def usage_partitions_maintain() -> dict:
    """Beat, daily: the coming months' partitions of usage events, and the months past the
    raw retention dropped (metering/retention.py says when)."""
    now = timezone.now()
    return {"created": usage_partitions_ensure(now=now), **asdict(usage_raw_retire(now=now))}


@shared_task
def usage_rollups_compact() -> dict:
    """Beat, daily: hourly rollups past the hourly retention summed per day."""
    return asdict(usage_rollups_compact_service(now=timezone.now()))


# Expires well within the beat's period: a sweep that waited in the queue for longer is
# dropped, the next one claims the same leases.
@shared_task(expires=5)
def leases_sweep() -> int:
    """Beat, every second: leases not renewed billed as interrupted usage, their slots and
    bucket shares freed (metering/leases.py). Safe to run twice at once: claims are atomic."""
    return leases_sweep_service()
