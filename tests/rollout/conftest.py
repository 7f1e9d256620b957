# The admission engine's fixtures (a flushed Redis, a frozen clock, a tenant with limits
# published): usage and the rollout run against the real engine too.
from tests.quotas.conftest import limiter, limiter_clock, patient_redis, tenant  # noqa: F401
