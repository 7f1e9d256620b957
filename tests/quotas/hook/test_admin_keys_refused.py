"""Admin keys authenticate the org-facing REST API only: the gateway never admits them."""

import pytest

from orgs.services import admin_key_create
from quotas.hook.gateway_tokens import gateway_token_cache_clear, gateway_token_create
from quotas.hook.routing import pool_routes_reload
from tests.hook import HookClient
from tests.quotas.conftest import tenant_create

pytestmark = pytest.mark.django_db(transaction=True)  # the served app's threads read rows


def test_admin_keys_never_authorize_inference(limiter):
    t = tenant_create(guaranteed_tps=100, burst_tps=100, daily_tokens=100_000,
                      max_concurrency=5)
    _, admin_secret = admin_key_create(org=t.org, name="ops", actor="test")
    gateway_token_cache_clear()
    pool_routes_reload()
    _, token = gateway_token_create(name="edge", actor="test")
    gateway = HookClient(HTTP_AUTHORIZATION=f"Bearer {token}")
    body = {"request_id": "r1", "api_key": admin_secret, "model": t.pool.model,
            "input_tokens": 10, "max_output_tokens": 10}
    refused = gateway.post("/api/gateway/v1/authorize", body, content_type="application/json")
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "invalid_api_key"
    body |= {"request_id": "r2", "api_key": t.plaintext}
    assert gateway.post("/api/gateway/v1/authorize", body,
                        content_type="application/json").status_code == 200
