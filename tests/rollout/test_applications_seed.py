import pytest

from console.management.seed_waitlist import seed_waitlist
from orgs.models import AuditEvent
from rollout.models import Application, ApplicationState, RolloutWave
from rollout.waitlist import waitlist_estimates
from tests.factories import PoolFactory

pytestmark = pytest.mark.django_db


def test_seed_covers_every_state_schedules_two_waves_and_is_idempotent(operator):
    pool = PoolFactory(region="us-east", capacity_tps=2_000)
    seed_waitlist(pool=pool, operator=operator)
    states = set(Application.objects.values_list("state", flat=True))
    assert states == set(ApplicationState.values)
    assert list(RolloutWave.objects.filter(state="scheduled").values_list("name", flat=True)) \
        == ["Wave 2", "General availability"]
    estimates = {e.wave.name for e in waitlist_estimates(pool=pool).values()}
    assert estimates == {"Wave 2", "General availability"}

    counts = (Application.objects.count(), RolloutWave.objects.count(),
              AuditEvent.objects.count())
    seed_waitlist(pool=pool, operator=operator)
    assert (Application.objects.count(), RolloutWave.objects.count(),
            AuditEvent.objects.count()) == counts
