"""What metering does when a lower app announces something (subscribed in
MeteringConfig.ready())."""

from datetime import datetime, timedelta

from django.db.models import F, Sum

from metering.models import UsageHourly


def day_usage_reading_received(*, org_ids: frozenset[int], pool_ids: frozenset[int],
                               day_start: datetime, used: dict) -> None:
    """The tokens recorded in the UTC day from `day_start`, per (org, pool) and
    (org, pool, key), from the hourly rollups (written with every usage batch)."""
    # Bounded above too: usage of a later day (a start a little ahead of our clock) is not
    # today's, whatever arrived.
    rows = (UsageHourly.objects.filter(org_id__in=org_ids, pool_id__in=pool_ids,
                                       hour__gte=day_start, hour__lt=day_start + timedelta(days=1))
            .values_list("org_id", "pool_id", "api_key_id")
            .annotate(total=Sum(F("input_tokens") + F("output_tokens"))))
    for org_id, pool_id, key_id, total in rows:
        used[(org_id, pool_id)] += total
        used[(org_id, pool_id, key_id)] += total
