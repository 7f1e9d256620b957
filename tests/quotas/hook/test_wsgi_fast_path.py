"""The WSGI fast path for the hook (config.wsgi) answers exactly like the Django views."""

from datetime import timedelta

import httpx
import pytest
from django.core import signals
from django.db import close_old_connections

from metering.models import UsageEvent
from quotas.hook.gateway_tokens import gateway_token_cache_clear, gateway_token_create
from quotas.hook.routing import pool_routes_reload
from quotas.limiter.clock import clock

pytestmark = pytest.mark.django_db


@pytest.fixture
def wsgi(tenant):
    from config.wsgi import application

    # As Django's test client does: the test's transaction must survive the request signals.
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    gateway_token_cache_clear()
    pool_routes_reload()
    _, token = gateway_token_create(name="edge", actor="test")
    client = httpx.Client(transport=httpx.WSGITransport(app=application),
                          base_url="http://127.0.0.1", headers={"Authorization": f"Bearer {token}"})
    yield client
    client.close()
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


def body(tenant, **extra):
    return {"request_id": "w1", "api_key": tenant.plaintext, "model": tenant.pool.model,
            "input_tokens": 1, "max_output_tokens": 9, **extra}


def test_fast_path_answers_like_the_view(wsgi, tenant, client):
    fast = wsgi.post("/api/gateway/v1/authorize", json=body(tenant))
    assert fast.status_code == 200 and fast.headers["content-type"] == "application/json"
    view = client.post("/api/gateway/v1/authorize", body(tenant),
                       content_type="application/json",
                       HTTP_AUTHORIZATION=wsgi.headers["Authorization"])
    assert view.json() == fast.json()  # the same request_id: the same reservation


def test_fast_path_refusals(wsgi, tenant):
    assert wsgi.post("/api/gateway/v1/authorize", json=body(tenant, input_tokens=-1)
                     ).json()["error"]["fields"].keys() == {"input_tokens"}
    bad_token = wsgi.post("/api/gateway/v1/authorize", json=body(tenant),
                          headers={"Authorization": "Bearer gw_x"})
    assert bad_token.status_code == 401
    bad_host = wsgi.post("/api/gateway/v1/authorize", json=body(tenant),
                         headers={"Host": "evil.example"})
    assert bad_host.status_code == 400 and bad_host.json()["error"]["code"] == "bad_host"


def test_usage_on_the_fast_path_answers_like_the_view(wsgi, tenant, client):
    """Usage is served by the fast path too (no Django request, middleware or response): the
    same answers, the same rows, and refusals without authorize's `allowed`."""
    admitted = wsgi.post("/api/gateway/v1/authorize", json=body(tenant)).json()
    start = clock.now() - timedelta(seconds=5)
    event = {"request_id": "w1", "reservation_id": admitted["reservation_id"],
             "input_tokens": 1, "output_tokens": 7, "status": "completed",
             "started_at": start.isoformat(), "finished_at": (start + timedelta(seconds=1))
             .isoformat()}
    fast = wsgi.post("/api/gateway/v1/usage", json=event)
    assert (fast.status_code, fast.json()["recorded"]) == (200, 1), fast.json()
    assert fast.headers["x-content-type-options"] == "nosniff"
    view = client.post("/api/gateway/v1/usage", event, content_type="application/json",
                       HTTP_AUTHORIZATION=wsgi.headers["Authorization"])
    assert view.json() == {**fast.json(), "recorded": 0, "duplicates": 1,
                           "results": [{"request_id": "w1", "result": "duplicate"}]}
    assert UsageEvent.objects.get(request_id="w1").output_tokens == 7
    bad_host = wsgi.post("/api/gateway/v1/usage", json=event, headers={"Host": "evil.example"})
    assert bad_host.status_code == 400 and bad_host.json() == {"error": {
        **bad_host.json()["error"], "code": "bad_host"}}
    bad_token = wsgi.post("/api/gateway/v1/usage", json=event,
                          headers={"Authorization": "Bearer gw_x"})
    assert bad_token.status_code == 401 and "allowed" not in bad_token.json()


def test_everything_else_goes_to_django(wsgi):
    assert wsgi.get("/healthz").json() == {"status": "ok"}
    assert wsgi.get("/api/gateway/v1/authorize").status_code == 405
    assert wsgi.get("/api/gateway/v1/usage").headers["allow"] == "POST"
