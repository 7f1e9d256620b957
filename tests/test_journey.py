"""The whole path from application to traffic, with nothing stubbed: apply, vet, approve, a wave
opens, the org becomes active, its limits reach the real Redis after commit, it creates a key,
a gateway authorizes a request with it and reports the usage."""

from datetime import timedelta

import pytest
from django.utils import timezone

from metering.models import UsageHourly
from orgs.models import OrgStatus
from orgs.services import api_key_create
from quotas.hook.gateway_tokens import gateway_token_cache_clear, gateway_token_create
from quotas.hook.routing import pool_routes_reload
from quotas.limiter.connection import limiter_reset
from rollout.applications import application_decide, application_reviewer_assign
from rollout.waves import waves_open_due
from tests.factories import PoolFactory, RolloutWaveFactory
from tests.hook import HookClient
from tests.waitlist import applicant_org, submit, tick_required

pytestmark = pytest.mark.django_db(transaction=True)  # the served app's threads read rows


@pytest.fixture
def gateway(redis_client):
    limiter_reset()
    gateway_token_cache_clear()
    pool_routes_reload()
    _, plaintext = gateway_token_create(name="edge-journey", actor="test")
    return HookClient(HTTP_AUTHORIZATION=f"Bearer {plaintext}")


def test_application_to_authorized_traffic(operator, gateway, django_capture_on_commit_callbacks):
    pool = PoolFactory(region="us-east", capacity_tps=1_000)
    org, owner = applicant_org("Acme")
    with django_capture_on_commit_callbacks(execute=True):
        application = submit(org, owner)
        application_reviewer_assign(application=application, reviewer=operator, actor=operator)
        tick_required(application, operator)
        application_decide(application=application, decision="approve", reason="fits",
                           actor=operator)
    RolloutWaveFactory(pool=pool, opens_at=timezone.now() - timedelta(minutes=1),
                       capacity_tps=2_000, guaranteed_tps=500, burst_tps=1_000)
    with django_capture_on_commit_callbacks(execute=True):
        assert waves_open_due() == 1
        _, api_key = api_key_create(org=org, name="first key", actor=owner)
    org.refresh_from_db()
    assert org.status == OrgStatus.ACTIVE

    pool_routes_reload()
    decision = gateway.post("/api/gateway/v1/authorize", {
        "request_id": "journey-1", "api_key": api_key, "model": pool.model,
        "input_tokens": 120, "max_output_tokens": 400}, content_type="application/json")
    assert decision.status_code == 200, decision.json()
    assert decision.json()["allowed"] is True
    assert decision.json()["org"] == org.pk

    now = timezone.now()
    usage = gateway.post("/api/gateway/v1/usage", {
        "request_id": "journey-1", "reservation_id": decision.json()["reservation_id"],
        "input_tokens": 120, "output_tokens": 380, "status": "completed",
        "started_at": (now - timedelta(seconds=1)).isoformat(),
        "first_token_at": (now - timedelta(milliseconds=900)).isoformat(),
        "finished_at": now.isoformat()}, content_type="application/json")
    assert usage.status_code == 200, usage.json()
    assert [r["result"] for r in usage.json()["results"]] == ["recorded"]
    rollup = UsageHourly.objects.get(org=org)
    assert (rollup.requests, rollup.input_tokens, rollup.output_tokens) == (1, 120, 380)
