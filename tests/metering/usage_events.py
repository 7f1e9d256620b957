"""Usage events for the partition, retention and compaction tests, recorded through the real
ingestion path (metering.usage.usage_record) with signed reservation ids."""

from datetime import UTC, datetime, timedelta

from quotas.hook.inputs import UsageInput
from quotas.hook.reservations import reservation_id_issue
from quotas.hook.routing import pool_routes_reload
from tests.quotas.conftest import Tenant, tenant_create


def routed_tenant() -> Tenant:
    """An org with an allocation and a key, its pool known to ingestion's routing cache."""
    tenant = tenant_create(guaranteed_tps=1000, burst_tps=1000, daily_tokens=10**9,
                           max_concurrency=50)
    pool_routes_reload()
    return tenant


def usage_event(tenant, request_id: str, started_at: datetime, *, input_tokens: int = 100,
                output_tokens: int = 300, status: str = "completed", ttft_ms: int = 200,
                decode_ms: int = 500) -> UsageInput:
    first = started_at + timedelta(milliseconds=ttft_ms)
    return UsageInput(
        request_id=request_id,
        reservation_id=reservation_id_issue(pool_id=tenant.pool.pk, org_id=tenant.org.pk,
                                            api_key_id=tenant.key.pk, request_id=request_id),
        input_tokens=input_tokens, output_tokens=output_tokens, status=status,
        started_at=started_at, first_token_at=first,
        finished_at=first + timedelta(milliseconds=decode_ms))


def month_start(at: datetime, *, months: int = 0) -> datetime:
    """Midnight UTC of the first day of `at`'s month, `months` later (or earlier)."""
    index = at.year * 12 + at.month - 1 + months
    return datetime(index // 12, index % 12 + 1, 1, tzinfo=UTC)
