"""REST for rollout waves: create, plan, open, close, auto-admission; bad input; access."""

from datetime import timedelta

import pytest
from django.utils import timezone

from orgs.models import AuditEvent
from rollout.models import PoolAdmission, RolloutWave
from tests.factories import PoolFactory, RolloutWaveFactory
from tests.waitlist import approved_application

pytestmark = pytest.mark.django_db


def _wave_payload(the_pool, **overrides) -> dict:
    payload = {
        "pool": the_pool.pk, "name": "General availability",
        "opens_at": (timezone.now() + timedelta(days=7)).isoformat(),
        "closes_at": (timezone.now() + timedelta(days=14)).isoformat(),
        "capacity_tps": 2_000, "max_orgs": 20, "guaranteed_tps": 500, "burst_tps": 1_000,
        "daily_tokens": 50_000_000, "max_concurrency": 16,
    }
    payload.update(overrides)
    return payload


def test_create_plan_open_close(operator_client, operator):
    pool = PoolFactory(region="us-east", capacity_tps=1_000)
    for uc in ("voice", "chat", "batch"):
        approved_application(operator, pool, uc.title(), use_case=uc)
    r = operator_client.post("/api/v1/operator/waves", _wave_payload(pool), format="json")
    assert r.status_code == 201, r.json()
    wave_id = r.json()["id"]

    plan = operator_client.get(f"/api/v1/operator/waves/{wave_id}/plan").json()
    assert [o["name"] for o in plan["admitted"]] == ["Voice", "Chat", "Batch"]
    assert (plan["capacity_tps_after"], plan["guaranteeable_tps_after"],
            plan["guaranteed_tps_after"], plan["free_tps_after"]) == (3_000, 2_700, 1_500, 1_200)
    assert plan["guaranteed_utilization"] == pytest.approx(1_500 / 2_700)
    assert plan["projected_tps"] == pytest.approx(3 * 400)  # expected peaks, no usage yet
    assert plan["projection_uses_observed_usage"] is False

    r = operator_client.post(f"/api/v1/operator/waves/{wave_id}/open")
    assert (r.status_code, r.json()["state"], r.json()["admitted_count"]) == (200, "open", 3)
    r = operator_client.post(f"/api/v1/operator/waves/{wave_id}/open")
    assert (r.status_code, r.json()["error"]["code"]) == (409, "wave_not_scheduled")
    assert operator_client.get(f"/api/v1/operator/waves/{wave_id}/plan").status_code == 409
    r = operator_client.post(f"/api/v1/operator/waves/{wave_id}/close", {"reason": "done"},
                             format="json")
    assert (r.status_code, r.json()["state"]) == (200, "closed")


@pytest.mark.parametrize("overrides", [
    {"burst_tps": 100},  # below guaranteed: the service says so
    {"burst_tps": 999_999},  # above the pool's capacity after the wave
    {"closes_at": timezone.now().isoformat()},
    {"capacity_tps": -1},
    {"max_orgs": 0},
    {"guaranteed_tps": "lots"},
    {"opens_at": "next tuesday"},
    {"pool": 999_999},
    {"name": ""},
])
def test_malformed_waves_are_400_and_write_nothing(operator_client, overrides):
    pool = PoolFactory(capacity_tps=1_000)
    r = operator_client.post("/api/v1/operator/waves", _wave_payload(pool, **overrides),
                             format="json")
    assert r.status_code == 400, r.json()
    assert r.json()["error"]["code"] in {"invalid_input", "invalid_wave"}
    assert not RolloutWave.objects.exists() and not AuditEvent.objects.exists()


def test_wave_list_filters_in_one_query(operator_client, django_assert_num_queries):
    pool = PoolFactory()
    RolloutWaveFactory.create_batch(3, pool=pool)
    RolloutWaveFactory()
    with django_assert_num_queries(1):
        r = operator_client.get(f"/api/v1/operator/waves?pool={pool.pk}&state=scheduled")
    assert len(r.json()) == 3
    assert operator_client.get("/api/v1/operator/waves?state=later").status_code == 400


def test_auto_admission_switch(operator_client):
    pool = PoolFactory()
    r = operator_client.put(f"/api/v1/operator/pools/{pool.pk}/auto-admission",
                            {"auto_admit": True}, format="json")
    assert (r.status_code, r.json()) == (200, {"auto_admit": True})
    assert PoolAdmission.objects.get(pool=pool).auto_admit is True
    r = operator_client.put(f"/api/v1/operator/pools/{pool.pk}/auto-admission",
                            {"auto_admit": "sometimes"}, format="json")
    assert r.status_code == 400
    r = operator_client.put("/api/v1/operator/pools/999999/auto-admission",
                            {"auto_admit": True}, format="json")
    assert r.status_code == 404


def test_orgs_cannot_use_wave_endpoints(two_orgs):
    a, _ = two_orgs
    wave = RolloutWaveFactory()
    assert a.client.get("/api/v1/operator/waves").status_code == 403
    assert a.client.post(f"/api/v1/operator/waves/{wave.pk}/open").status_code == 403
    wave.refresh_from_db()
    assert wave.state == "scheduled"


@pytest.mark.django_db
def test_a_form_without_auto_admit_is_a_400_not_off(operator_client):
    """Found by schemathesis (negative data): DRF read a form body without the boolean as false,
    so a form PUT without `auto_admit` switched auto-admission off."""
    pool = PoolFactory()
    operator_client.put(f"/api/v1/operator/pools/{pool.pk}/auto-admission",
                        {"auto_admit": True}, format="json")
    r = operator_client.put(f"/api/v1/operator/pools/{pool.pk}/auto-admission", {},
                            format="multipart")
    assert r.status_code == 400
    assert set(r.json()["error"]["fields"]) == {"auto_admit"}
    assert PoolAdmission.objects.get(pool=pool).auto_admit is True
