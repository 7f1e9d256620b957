"""Waitlist positions and estimated admission, recomputed as waves are scheduled."""

from datetime import timedelta

import pytest
from django.utils import timezone

from rollout.waitlist import org_waitlist_estimate, waitlist_estimates
from tests.factories import AllocationFactory, PoolFactory, RolloutWaveFactory
from tests.waitlist import approved_application

pytestmark = pytest.mark.django_db


def _summary(pool) -> dict:
    return {org_id: (e.position, e.wave.name if e.wave else None)
            for org_id, e in waitlist_estimates(pool=pool).items()}


def test_position_and_estimate_change_when_waves_are_added(operator):
    pool = PoolFactory(region="us-east", capacity_tps=1_000)
    AllocationFactory(pool=pool, guaranteed_tps=900)  # the pool is full today
    voice = approved_application(operator, pool, "Voicey", use_case="voice")
    chat = approved_application(operator, pool, "Chatty", use_case="chat")
    batch = approved_application(operator, pool, "Batchy", use_case="batch")
    assert _summary(pool) == {voice.org_id: (1, None), chat.org_id: (2, None),
                              batch.org_id: (3, None)}
    assert org_waitlist_estimate(org=chat.org).label == "not yet scheduled"

    # 1,100 more TPS -> 990 more guaranteeable: room for two guarantees of 400.
    RolloutWaveFactory(pool=pool, name="Beta", capacity_tps=1_100, guaranteed_tps=400,
                       opens_at=timezone.now() + timedelta(days=3))
    assert _summary(pool) == {voice.org_id: (1, "Beta"), chat.org_id: (2, "Beta"),
                              batch.org_id: (3, None)}

    RolloutWaveFactory(pool=pool, name="GA", capacity_tps=500, guaranteed_tps=400,
                       opens_at=timezone.now() + timedelta(days=10))
    assert _summary(pool)[batch.org_id] == (3, "GA")  # Beta's leftover 190 + GA's 450
    assert org_waitlist_estimate(org=batch.org).label.startswith("GA, opening ")


def test_an_earlier_wave_is_simulated_first_even_if_created_later(operator):
    pool = PoolFactory(region="us-east", capacity_tps=0)
    app = approved_application(operator, pool, "Voicey")
    RolloutWaveFactory(pool=pool, name="Late", opens_at=timezone.now() + timedelta(days=20))
    RolloutWaveFactory(pool=pool, name="Early", opens_at=timezone.now() + timedelta(days=2))
    assert org_waitlist_estimate(org=app.org).wave.name == "Early"


def test_orgs_not_approved_have_no_position(operator):
    pool = PoolFactory(region="us-east")
    app = approved_application(operator, pool, "Voicey")
    other = AllocationFactory(pool=pool).org  # active
    assert org_waitlist_estimate(org=other) is None
    assert org_waitlist_estimate(org=app.org).position == 1
