"""Every error answer has the one shape of sluice/errors.py, whoever found the problem:
DRF's validation and authentication, a service's validation, a domain refusal (409, 422), the
gateway hook (served on the event loop)."""

from decimal import Decimal

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from orgs.models import OrgStatus
from quotas.hook.gateway_tokens import gateway_token_cache_clear, gateway_token_create
from tests.factories import AllocationFactory, OrganizationFactory, PoolFactory
from tests.hook import HookClient

pytestmark = pytest.mark.django_db

SHAPE = {"code", "message", "fields", "details", "retry_after_ms", "retryable"}


def one_shape(body: dict) -> dict:
    """The error object, after checking it has the one shape and nothing else."""
    assert set(body) == {"error"}, body
    error = body["error"]
    assert {"code", "message"} <= set(error) <= SHAPE, error
    assert isinstance(error["code"], str) and error["code"]
    assert isinstance(error["message"], str) and error["message"]
    if "fields" in error:
        assert error["fields"] and all(isinstance(name, str) and problems
                                       for name, problems in error["fields"].items()), error
    if "details" in error:
        assert isinstance(error["details"], dict) and "fields" not in error["details"], error
    return error


def test_drf_validation_names_the_fields(operator_client):
    r = operator_client.post("/api/v1/pools/", {"model": "m", "capacity_tps": 0}, format="json")
    error = one_shape(r.json())
    assert (r.status_code, error["code"]) == (400, "invalid_input")
    assert {"region", "capacity_tps", "guaranteeable_ratio"} <= set(error["fields"])


def test_drf_authentication_and_not_found(operator_client):
    r = APIClient().get("/api/v1/pools/")
    assert (r.status_code, one_shape(r.json())["code"]) == (401, "not_authenticated")
    r = operator_client.get("/api/v1/pools/999999/")
    assert (r.status_code, one_shape(r.json())["code"]) == (404, "not_found")


def test_a_service_validation_error_puts_fields_where_drf_does(operator_client):
    pool = PoolFactory(capacity_tps=1_000)
    r = operator_client.post("/api/v1/operator/waves", {
        "pool": pool.pk, "name": "GA", "opens_at": timezone.now().isoformat(),
        "capacity_tps": 0, "max_orgs": 1, "guaranteed_tps": 10, "burst_tps": 5_000,
        "daily_tokens": 1_000, "max_concurrency": 1}, format="json")
    error = one_shape(r.json())
    assert (r.status_code, error["code"]) == (400, "invalid_wave")
    assert error["fields"] == {"burst_tps": ["Cannot exceed the pool's capacity after the wave."]}


def test_domain_refusals_carry_details(operator_client):
    org = OrganizationFactory(status=OrgStatus.APPLIED)
    r = operator_client.post(f"/api/v1/orgs/{org.pk}/transitions/", {"action": "suspend"},
                             format="json")
    error = one_shape(r.json())
    assert (r.status_code, error["code"]) == (409, "illegal_transition")
    assert error["details"]["status"] == OrgStatus.APPLIED

    pool = PoolFactory(capacity_tps=1_000, guaranteeable_ratio=Decimal("1"))
    AllocationFactory(pool=pool, guaranteed_tps=1_000, burst_tps=1_000)
    r = operator_client.post("/api/v1/allocations/", {
        "org": OrganizationFactory().pk, "pool": pool.pk, "guaranteed_tps": 1,
        "burst_tps": 1, "daily_tokens": 1, "max_concurrency": 1}, format="json")
    error = one_shape(r.json())
    assert (r.status_code, error["code"], error["details"]["free_tps"]) == (
        422, "capacity_exhausted", 0)


@pytest.mark.django_db(transaction=True)  # the served app's threads read the token
def test_the_gateway_hook_answers_in_the_same_shape():
    gateway_token_cache_clear()
    _, token = gateway_token_create(name="edge", actor="test")
    hook = HookClient(token)
    r = hook.post("/api/gateway/v1/authorize", {"request_id": "r1"},
                  content_type="application/json")
    body = r.json()
    assert body.pop("allowed") is False  # authorize says so on every answer but an admission
    error = one_shape(body)
    assert (r.status_code, error["code"]) == (400, "invalid_input")
    # max_output_tokens is optional (absent: the output estimate alone).
    assert {"api_key", "model", "input_tokens"} <= set(error["fields"])
    r = HookClient("gw_nope").post("/api/gateway/v1/usage", {})
    assert (r.status_code, one_shape(r.json())["code"]) == (401, "invalid_gateway_token")


def test_the_hook_refuses_a_bad_host_in_the_same_shape():
    r = HookClient(headers={"host": "evil.example"}).post("/api/gateway/v1/authorize", {})
    body = r.json()
    assert body.pop("allowed") is False
    assert (r.status_code, one_shape(body)["code"]) == (400, "bad_host")
