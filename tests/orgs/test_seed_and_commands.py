import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.utils import timezone
from rest_framework.test import APIClient

from orgs.models import AuditEvent, Organization, OrgStatus
from quotas.ledger import FOREVER, ledger_steps
from quotas.models import Allocation, Booking, CapacityPool
from quotas.selectors import pool_capacity_summary
from rollout.models import RolloutWave
from tests.factories import OperatorFactory

pytestmark = pytest.mark.django_db


def snapshot():
    return (
        sorted(Organization.objects.values_list("name", "status")),
        sorted(Allocation.objects.values_list("org__name", "guaranteed_tps", "status")),
        AuditEvent.objects.count(),
    )


def test_seed_demo_refuses_to_run_outside_development(settings):
    settings.DEBUG = False
    with pytest.raises(CommandError, match="SLUICE_DEBUG=1"):
        call_command("seed_demo")
    assert not get_user_model().objects.exists()
    assert not Organization.objects.exists()


def test_seed_demo_covers_every_state_and_is_idempotent(settings):
    settings.DEBUG = True  # development only
    call_command("seed_demo")
    first = snapshot()
    call_command("seed_demo")
    assert snapshot() == first
    assert {s for _, s in first[0]} == set(OrgStatus.values)
    pool = CapacityPool.objects.get(model="gpt-5.6-sol", region="us-east")
    assert pool.queue_max_wait_ms == 20_000  # the demo's clients can wait (queue_threshold)
    summary = pool_capacity_summary(pool=pool)
    opened = RolloutWave.objects.filter(pool=pool, state="open")
    assert summary.capacity_tps == 120_000 + sum(w.capacity_tps for w in opened)
    assert summary.guaranteed_tps <= summary.guaranteeable_tps
    active = Organization.objects.filter(status=OrgStatus.ACTIVE)
    assert all(Allocation.objects.filter(org=o, status="active").exists() for o in active)
    # Bookings: once each, on the ledger (never over at any instant), one of them ended, one in
    # force.
    assert Booking.objects.count() == 5
    assert Booking.objects.filter(state="ended").count() == 1
    assert Booking.objects.filter(state="active").count() == 1
    now = timezone.now()
    steps = ledger_steps(pool=pool, start=now, end=now + FOREVER)
    assert max(s.output_tps for s in steps) <= pool.guaranteeable_tps


def test_operator_token_authenticates_scripts(capsys):
    operator = OperatorFactory(email="ops@sluice.dev")
    call_command("operator_token_create", operator.email, name="deploy script")
    token = capsys.readouterr().out.strip().splitlines()[-1]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert client.get("/api/v1/orgs/").status_code == 200
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token[:-2]}xx")
    response = client.get("/api/v1/orgs/")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "authentication_failed"
