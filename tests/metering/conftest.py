# The admission engine's fixtures (a flushed Redis, a frozen clock, a tenant with limits
# published): usage and the rollout run against the real engine too.
import pytest

from quotas.hook.routing import pool_routes_reload
from tests.quotas.conftest import (  # noqa: F401 (fixtures, found by name)
    limiter,
    limiter_clock,
    patient_redis,
    tenant,
    tenant_create,
)


@pytest.fixture
def t(limiter):  # noqa: F811 (the limiter fixture, imported above)
    """A tenant admitting 5 requests at once and 100,000 tokens a day, its pool routed."""
    t = tenant_create(guaranteed_tps=1000, burst_tps=1000, daily_tokens=100_000,
                      max_concurrency=5)
    pool_routes_reload()
    return t
