"""Admin writes go through services only (sluice/admin.py): a service's refusal is a form error
(the page again, 200, with the message) and nothing is written; rows that no service deletes
cannot be deleted, and rows that are never edited cannot be changed."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.models import PriceVersion
from orgs.models import ApiKey, AuditEvent, Membership
from quotas.hook.gateway_tokens import gateway_token_create
from quotas.models import Allocation, CapacityPool, GatewayToken
from rollout.models import PoolAdmission, RolloutWave
from tests.factories import (
    AllocationFactory,
    MembershipFactory,
    OrganizationFactory,
    PoolFactory,
    RolloutWaveFactory,
)
from tests.totp import console_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(operator):
    return console_client(operator)


def _datetime(name: str, moment) -> dict:
    return {f"{name}_0": moment.strftime("%Y-%m-%d"), f"{name}_1": moment.strftime("%H:%M:%S")}


def test_pool_change_below_its_guarantees_is_refused_on_the_form(admin_client):
    pool = PoolFactory(capacity_tps=1_000, guaranteeable_ratio=Decimal("1"))
    AllocationFactory(pool=pool, guaranteed_tps=800, burst_tps=800)
    r = admin_client.post(f"/admin/quotas/capacitypool/{pool.pk}/change/", {
        "capacity_tps": 500, "guaranteeable_ratio": "1", "limiter_failure_policy":
        pool.limiter_failure_policy, "speed_floor_output_tps": pool.speed_floor_output_tps,
        "ttft_ceiling_ms": pool.ttft_ceiling_ms})
    assert r.status_code == 200
    assert "Reduce allocations by 300 tokens/s first." in r.content.decode()
    assert CapacityPool.objects.get(pk=pool.pk).capacity_tps == 1_000
    assert not AuditEvent.objects.filter(action="pool.capacity_set").exists()


def test_allocation_change_beyond_capacity_is_refused_on_the_form(admin_client):
    pool = PoolFactory(capacity_tps=1_000, guaranteeable_ratio=Decimal("1"))
    allocation = AllocationFactory(pool=pool, guaranteed_tps=500, burst_tps=500)
    AllocationFactory(pool=pool, guaranteed_tps=500, burst_tps=500)
    r = admin_client.post(f"/admin/quotas/allocation/{allocation.pk}/change/", {
        "guaranteed_tps": 600, "burst_tps": 600, "daily_tokens": allocation.daily_tokens,
        "max_concurrency": allocation.max_concurrency})
    assert r.status_code == 200 and "cannot guarantee 100 more tokens/s" in r.content.decode()
    assert Allocation.objects.get(pk=allocation.pk).guaranteed_tps == 500


def test_wave_refused_by_the_service_shows_on_the_form(admin_client):
    pool = PoolFactory(capacity_tps=1_000)
    opens = timezone.now() + timedelta(days=2)
    r = admin_client.post("/admin/rollout/rolloutwave/add/", {
        "pool": pool.pk, "name": "GA", **_datetime("opens_at", opens), "capacity_tps": 500,
        "max_orgs": 5, "guaranteed_tps": 100, "burst_tps": 1_501, "daily_tokens": 1_000_000,
        "max_concurrency": 4})
    assert r.status_code == 200 and "capacity after the wave." in r.content.decode()
    assert not RolloutWave.objects.exists()


def test_a_wave_is_never_edited_in_the_admin(admin_client):
    wave = RolloutWaveFactory(name="GA")
    r = admin_client.post(f"/admin/rollout/rolloutwave/{wave.pk}/change/", {"name": "Renamed"})
    assert r.status_code == 403
    assert RolloutWave.objects.get().name == "GA" and RolloutWave.objects.count() == 1


def test_price_version_refused_by_the_service_shows_on_the_form(admin_client):
    pool = PoolFactory()
    r = admin_client.post("/admin/billing/priceversion/add/", {
        "pool": pool.pk, "effective_from_0": "2020-01-01", "effective_from_1": "00:00:00",
        "input_micros_per_mtok": 5_000_000, "output_micros_per_mtok": 30_000_000,
        "premium_input_micros_per_mtok": 0, "premium_output_micros_per_mtok": 0,
        "booking_output_micros_per_tps_hour": 20_000, "booking_input_micros_per_tps_hour": 4_000})
    assert r.status_code == 200 and "cannot start in an hour that has begun" in r.content.decode()
    assert not PriceVersion.objects.exists()


def test_pool_admission_changes_through_the_service(admin_client):
    # pool_auto_admit_set refuses nothing; what the admin can get wrong is a second row.
    pool = PoolFactory()
    admin_client.post("/admin/rollout/pooladmission/add/", {"pool": pool.pk})
    row = PoolAdmission.objects.get(pool=pool)
    r = admin_client.post(f"/admin/rollout/pooladmission/{row.pk}/change/", {"auto_admit": "on"})
    assert r.status_code == 302 and PoolAdmission.objects.get(pool=pool).auto_admit is True
    assert AuditEvent.objects.filter(action="pool.auto_admit_set").count() == 1
    again = admin_client.post("/admin/rollout/pooladmission/add/", {"pool": pool.pk})
    assert again.status_code == 200 and PoolAdmission.objects.count() == 1


def test_gateway_tokens_are_created_through_the_service_and_never_edited(admin_client):
    # gateway_token_create refuses only a blank name, which the form refuses first.
    token, _ = gateway_token_create(name="edge", actor="test")
    r = admin_client.post(f"/admin/quotas/gatewaytoken/{token.pk}/change/", {"name": "x"})
    assert r.status_code == 403 and GatewayToken.objects.get().name == "edge"


@pytest.mark.parametrize("url", [
    "/admin/orgs/organization/{org}/delete/", "/admin/quotas/allocation/{allocation}/delete/",
    "/admin/orgs/apikey/{key}/delete/", "/admin/orgs/membership/{membership}/delete/",
])
def test_no_row_is_deleted_behind_the_services(admin_client, url):
    org = OrganizationFactory()
    allocation = AllocationFactory(org=org)
    membership = MembershipFactory(org=org)
    key = ApiKey.objects.create(org=org, name="k", lookup="abcdefabcdef", digest="x" * 64)
    r = admin_client.post(url.format(org=org.pk, allocation=allocation.pk, key=key.pk,
                                     membership=membership.pk), {"post": "yes"})
    assert r.status_code == 403
    assert (Allocation.objects.count(), ApiKey.objects.count(),
            Membership.objects.count()) == (1, 1, 1)
