"""POST /api/gateway/v1/authorize over HTTP, against real PostgreSQL and Redis."""

import pytest
from django.core.management import call_command
from django.test import Client

from metering.models import UsageEvent
from orgs.models import AuditEvent
from quotas.hook.gateway_tokens import (
    gateway_token_cache_clear,
    gateway_token_create,
    gateway_token_revoke,
)
from quotas.hook.reservations import reservation_id_parse
from quotas.hook.routing import pool_routes_reload
from tests.hook import HookClient
from tests.quotas.conftest import tenant_create

pytestmark = pytest.mark.django_db(transaction=True)  # the served app's threads read rows
URL = "/api/gateway/v1/authorize"


@pytest.fixture
def gateway(tenant):
    gateway_token_cache_clear()
    pool_routes_reload()
    token, plaintext = gateway_token_create(name="edge-1", actor="test")
    client = HookClient(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
    client.token = token
    return client


def ask(tenant, **overrides):
    body = {"request_id": "req-1", "api_key": tenant.plaintext, "model": tenant.pool.model,
            "input_tokens": 30, "max_output_tokens": 70}
    body.update(overrides)
    return {k: v for k, v in body.items() if v is not None}


def post(client, body):
    return client.post(URL, body, content_type="application/json")


def test_allowed_answer_has_the_contract_fields(gateway, tenant):
    r = post(gateway, ask(tenant))
    assert r.status_code == 200
    body = r.json()
    assert body["allowed"] is True and body["org"] == tenant.org.pk
    assert body["reserved_tokens"] == 100
    ref = reservation_id_parse(body["reservation_id"], request_id="req-1")
    assert (ref.pool_id, ref.org_id, ref.api_key_id) == (tenant.pool.pk, tenant.org.pk,
                                                         tenant.key.pk)
    assert body["headers"] == {
        "x-ratelimit-limit-tokens": "1000", "x-ratelimit-remaining-tokens": "900",
        "x-ratelimit-reset-tokens": "1s",
        "x-ratelimit-limit-tokens-day": "100000", "x-ratelimit-remaining-tokens-day": "99900",
        "x-ratelimit-reset-tokens-day": "12h0m0s",
        "x-ratelimit-limit-requests": "5", "x-ratelimit-remaining-requests": "4",
        "x-ratelimit-reset-requests": "0ms",
    }


def test_retried_request_gets_the_same_reservation(gateway, tenant):
    first = post(gateway, ask(tenant)).json()
    again = post(gateway, ask(tenant)).json()
    assert again["reservation_id"] == first["reservation_id"]
    assert again["headers"]["x-ratelimit-remaining-tokens-day"] == "99900"


def test_dry_run_reserves_nothing(gateway, tenant):
    body = post(gateway, ask(tenant, dry_run=True)).json()
    assert body["allowed"] and body["dry_run"] and body["reservation_id"] is None
    assert post(gateway, ask(tenant, request_id="r2")).json()["headers"][
        "x-ratelimit-remaining-tokens-day"] == "99900"


def test_429_carries_code_retry_after_and_headers(gateway, tenant):
    for i in range(5):
        assert post(gateway, ask(tenant, request_id=f"r{i}", input_tokens=1,
                                 max_output_tokens=1)).status_code == 200
    r = post(gateway, ask(tenant, request_id="r5"))
    assert r.status_code == 429
    body = r.json()
    assert body["allowed"] is False
    assert body["error"]["code"] == "concurrency_exceeded"
    assert 1 <= body["error"]["retry_after_ms"] <= 1000
    assert body["headers"]["retry-after"] == "1"
    assert body["headers"]["x-ratelimit-remaining-requests"] == "0"


def test_unknown_key_is_401(gateway, tenant):
    r = post(gateway, ask(tenant, api_key="sk_000000000000_wrong"))
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"


def test_suspended_org_is_403(gateway, tenant, django_capture_on_commit_callbacks):
    from orgs.services.lifecycle import org_suspend

    with django_capture_on_commit_callbacks(execute=True):
        org_suspend(org=tenant.org, actor="test")
    r = post(gateway, ask(tenant))
    assert r.status_code == 403 and r.json()["error"]["code"] == "org_not_active"


def test_waitlisted_org_with_a_prepared_allocation_is_403(gateway, tenant):
    from orgs.models import OrgStatus
    from tests.factories import OrganizationFactory

    waiting = OrganizationFactory(status=OrgStatus.ACTIVE)
    other = tenant_create(pool=tenant.pool, org=waiting)
    type(waiting).objects.filter(pk=waiting.pk).update(status=OrgStatus.APPROVED)
    call_command("limiter_sync", pool=[tenant.pool.pk])
    r = post(gateway, ask(other))
    assert r.status_code == 403 and r.json()["error"]["code"] == "org_not_active"


@pytest.mark.parametrize("auth", [None, "Bearer gw_000000000000_nope", "Bearer op_x_y"])
def test_missing_or_wrong_gateway_token_is_401(tenant, auth):
    client = HookClient(HTTP_AUTHORIZATION=auth) if auth else HookClient()
    r = post(client, ask(tenant))
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_gateway_token"


def test_revoked_gateway_token_is_refused(gateway, tenant, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):  # publishes after the commit
        gateway_token_revoke(token=gateway.token, actor="test")
    gateway_token_cache_clear()  # a process notices within REFRESH_SECONDS; here, at once
    assert post(gateway, ask(tenant)).status_code == 401
    assert AuditEvent.objects.filter(action="gateway_token.revoke").count() == 1


def test_gateway_token_commands(tenant, capsys, django_capture_on_commit_callbacks):
    call_command("gateway_token_create", "edge-2")
    plaintext = capsys.readouterr().out.strip()
    assert plaintext.startswith("gw_")
    gateway_token_cache_clear()
    client = HookClient(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
    pool_routes_reload()
    assert post(client, ask(tenant)).status_code == 200
    with django_capture_on_commit_callbacks(execute=True):  # publishes after the commit
        call_command("gateway_token_revoke", plaintext[:15])
    gateway_token_cache_clear()
    assert post(client, ask(tenant, request_id="r2")).status_code == 401


@pytest.mark.parametrize("body, field", [
    ({"request_id": ""}, "request_id"),
    ({"request_id": "has space"}, "request_id"),
    ({"request_id": "x" * 129}, "request_id"),
    ({"api_key": None}, "api_key"),
    ({"model": None}, "model"),
    ({"input_tokens": -1}, "input_tokens"),
    ({"input_tokens": "5"}, "input_tokens"),
    ({"input_tokens": True}, "input_tokens"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
    ({"max_output_tokens": 1.5}, "max_output_tokens"),
    ({"dry_run": "yes"}, "dry_run"),
    ({"region": 7}, "region"),
])
def test_malformed_fields_are_400_and_reserve_nothing(gateway, tenant, body, field):
    r = post(gateway, ask(tenant, **body))
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["code"] == "invalid_input" and field in error["fields"]
    assert post(gateway, ask(tenant, request_id="ok")).json()["headers"][
        "x-ratelimit-remaining-tokens-day"] == "99900"


@pytest.mark.parametrize("raw", [b"{not json", b"[1,2]", b'"text"', b""])
def test_non_object_bodies_are_400(gateway, raw):
    r = gateway.post(URL, raw, content_type="application/json")
    assert r.status_code == 400 and r.json()["error"]["code"] == "malformed_request"


def test_unknown_model_and_ambiguous_region(gateway, tenant):
    from tests.factories import PoolFactory

    assert post(gateway, ask(tenant, model="nope")).json()["error"]["code"] == "unknown_model"
    PoolFactory(model=tenant.pool.model, region="eu-west")
    pool_routes_reload()
    r = post(gateway, ask(tenant))
    assert r.status_code == 400 and r.json()["error"]["code"] == "region_required"
    assert post(gateway, ask(tenant, region="us-east")).status_code == 200


def test_get_is_405(gateway):
    assert gateway.get(URL).status_code == 405


def test_authorize_writes_nothing_to_postgres(gateway, tenant, django_assert_num_queries):
    post(gateway, ask(tenant))  # warm the process caches (gateway token, pool routes)
    with django_assert_num_queries(0):
        assert post(gateway, ask(tenant, request_id="r2")).status_code == 200
    assert UsageEvent.objects.count() == 0


def test_schema_documents_the_hook(operator_client):
    schema = operator_client.get("/api/schema/", {"format": "json"}).json()
    authorize = schema["paths"]["/api/gateway/v1/authorize"]["post"]
    assert set(authorize["responses"]) >= {"200", "400", "401", "403", "429", "503"}
    fields = schema["components"]["schemas"]["AuthorizeRequest"]["properties"]
    assert set(fields) == {"request_id", "api_key", "model", "region", "input_tokens",
                           "max_output_tokens", "dry_run", "service_tier", "lease",
                           "gateway_process", "queue_threshold_ms"}
    for call in ("heartbeat", "release"):
        lease = schema["paths"][f"/api/gateway/v1/leases/{call}"]["post"]
        assert set(lease["responses"]) == {"200", "400", "401", "503"}


def test_metrics_count_decisions_by_outcome(gateway, tenant):
    post(gateway, ask(tenant))
    post(gateway, ask(tenant, api_key="sk_000000000000_wrong", request_id="r2"))
    text = Client().get("/metrics").content.decode()
    assert 'sluice_authorize_decisions_total{limiter="redis",outcome="allowed"}' in text
    assert 'sluice_authorize_decisions_total{limiter="redis",outcome="invalid_api_key"}' in text
    assert "sluice_authorize_seconds_bucket" in text
