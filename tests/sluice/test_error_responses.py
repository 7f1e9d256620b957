"""Every answer under /api/ is the one JSON error shape, including those no
view wrote: no URL matched, a body past the upload limit, an exception a view let through, a
method a function view does not serve."""

import pytest
from django.test import Client

from quotas.api import views as quota_views
from tests.hook import HookClient
from tests.sluice.test_error_shape import one_shape

pytestmark = pytest.mark.django_db(transaction=True)  # the served app's threads read rows


def test_an_unmatched_api_url_is_the_json_404(operator_client):
    for path in ("/api/v1/pools/abc/capacity/", "/api/v1/nothing", "/api/gateway/v1/nope"):
        r = operator_client.get(path)
        assert r.status_code == 404 and r["Content-Type"] == "application/json"
        assert one_shape(r.json())["code"] == "not_found"


def test_an_unmatched_api_url_is_the_json_404_with_debug_on_too(operator_client, settings):
    # dev.py run has DEBUG on, where Django ignores handler404 for its technical page.
    settings.DEBUG = True
    r = operator_client.get("/api/v1/pools/abc/capacity/")
    assert r.status_code == 404 and r["Content-Type"] == "application/json"
    assert one_shape(r.json())["code"] == "not_found"
    assert Client().get("/no-such-page/")["Content-Type"].startswith("text/html")


def test_pages_outside_the_api_keep_django_s_404():
    r = Client().get("/no-such-page/")
    assert r.status_code == 404 and r["Content-Type"].startswith("text/html")


def test_an_exception_under_api_is_the_json_500(operator_client, monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("boom")
    monkeypatch.setattr(quota_views.PoolCapacityApi, "post", boom)
    operator_client.raise_request_exception = False
    r = operator_client.post("/api/v1/pools/1/capacity/", {}, format="json")
    assert r.status_code == 500 and r["Content-Type"] == "application/json"
    assert one_shape(r.json())["code"] == "internal_error"


def test_an_exception_in_the_hook_is_the_json_500(monkeypatch, redis_client):
    from metering.api import hook
    from quotas.hook.gateway_tokens import gateway_token_cache_clear, gateway_token_create

    def boom(*, events):
        raise RuntimeError("boom")
    monkeypatch.setattr(hook, "usage_record", boom)
    gateway_token_cache_clear()
    _, token = gateway_token_create(name="edge", actor="test")
    client = HookClient(HTTP_AUTHORIZATION=f"Bearer {token}", raise_request_exception=False)
    r = client.post("/api/gateway/v1/usage", {"request_id": "x"}, content_type="application/json")
    assert r.status_code == 400  # malformed first: the handler is only reached when valid
    monkeypatch.setattr(hook, "usage_input", lambda body: [])
    r = client.post("/api/gateway/v1/usage", {"request_id": "x"}, content_type="application/json")
    assert r.status_code == 500 and one_shape(r.json())["code"] == "internal_error"


def test_a_body_past_the_upload_limit_to_the_stripe_webhook_is_the_json_400(settings):
    body = b"x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1)
    r = Client().post("/api/billing/stripe/webhook", body, content_type="application/json")
    assert r.status_code == 400 and one_shape(r.json())["code"] == "malformed_request"


def test_a_body_past_the_upload_limit_to_a_rest_endpoint_is_the_json_400(operator_client,
                                                                         settings):
    body = b'{"model": "' + b"m" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1) + b'"}'
    r = operator_client.generic("POST", "/api/v1/pools/", body, content_type="application/json")
    assert r.status_code == 400 and one_shape(r.json())["code"] == "malformed_request"


def test_405_under_api_is_json_and_names_the_allowed_methods(operator_client):
    r = Client().get("/api/billing/stripe/webhook")
    assert r.status_code == 405 and r["Allow"] == "POST"
    assert one_shape(r.json())["code"] == "method_not_allowed"
    r = operator_client.delete("/api/v1/pools/")
    assert r.status_code == 405 and "GET" in r["Allow"]
    assert one_shape(r.json())["code"] == "method_not_allowed"
