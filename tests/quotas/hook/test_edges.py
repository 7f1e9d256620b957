"""The hook's edges: bodies nested deep, too large or chunked;
request ids with a trailing newline; a null reservation_id; refusals that keep the authorize
shape (`allowed`); 405 with `Allow`. Through the served application (tests/hook.py)."""

from datetime import timedelta

import orjson
import pytest

from orgs.models import OrgStatus
from orgs.services.api_keys import api_key_create
from quotas.hook.gateway_tokens import gateway_token_cache_clear, gateway_token_create
from quotas.hook.inputs import MAX_EVENTS, MAX_TOKENS
from quotas.hook.routing import pool_routes_reload
from quotas.limiter.clock import clock
from quotas.publish import limiter_sync_pool
from tests.factories import OrganizationFactory
from tests.hook import HookClient
from tests.sluice.test_error_shape import one_shape

pytestmark = pytest.mark.django_db(transaction=True)  # the served app's threads read rows
AUTHORIZE, USAGE = "/api/gateway/v1/authorize", "/api/gateway/v1/usage"


@pytest.fixture
def token(tenant):
    gateway_token_cache_clear()
    pool_routes_reload()
    return gateway_token_create(name="edge", actor="test")[1]


@pytest.fixture
def hook(token) -> HookClient:
    return HookClient(token)


@pytest.fixture
def view(hook):
    """post(path, body bytes, **headers)."""
    def post(path, content, **headers):
        return hook.post(path, content=content, headers=headers)
    return post


def shape(r) -> dict:
    """The error of a hook answer (authorize's also says `allowed: false`)."""
    body = r.json()
    assert body.pop("allowed", False) is False
    return one_shape(body)


def ask(tenant, **extra) -> dict:
    return {"request_id": "e1", "api_key": tenant.plaintext, "model": tenant.pool.model,
            "input_tokens": 1, "max_output_tokens": 9, **extra}


def usage_event(tenant, **extra) -> dict:
    start = clock.now() - timedelta(seconds=5)
    return {"request_id": "u1", "input_tokens": 1, "output_tokens": 1, "status": "completed",
            "started_at": start.isoformat(), "finished_at": (start + timedelta(seconds=1))
            .isoformat(), **extra}


DEEP = [b"[" * 1000, b"[" * 1000 + b"]" * 1000, b'{"a":' * 1000 + b"1" + b"}" * 1000,
        b'{"events":' + b"[" * 2000 + b"]" * 2000 + b"}", b"[" * 100_000 + b"]" * 100_000]


@pytest.mark.parametrize("path", [AUTHORIZE, USAGE])
@pytest.mark.parametrize("body", DEEP, ids=["open", "closed", "objects", "events", "deeper"])
def test_deeply_nested_json_is_400_malformed_request(view, hook, path, body):
    for r in (view(path, body), hook.post(path, content=body)):
        assert r.status_code == 400, r.content[:200]
        assert shape(r)["code"] == "malformed_request"


def test_a_body_past_the_upload_limit_is_the_json_413(view, settings):
    body = b'{"events": [' + b" " * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 10) + b"]}"
    for path in (USAGE, AUTHORIZE):
        r = view(path, body)
        assert r.status_code == 413, r.content[:200]
        assert shape(r)["code"] == "request_too_large"


def _chunks(data: bytes) -> list[bytes]:
    return [data[:10], data[10:]]


def test_chunked_bodies_are_read(hook, tenant, limiter_clock):
    r = hook.post(AUTHORIZE, chunks=_chunks(orjson.dumps(ask(tenant))))
    assert (r.status_code, r.json()["allowed"]) == (200, True), r.json()
    r = hook.post(USAGE, chunks=_chunks(orjson.dumps(usage_event(
        tenant, reservation_id=r.json()["reservation_id"], request_id="e1"))))
    assert (r.status_code, r.json()["recorded"]) == (200, 1), r.json()


def test_chunked_body_past_the_limit_is_413(hook, settings):
    big = b'{"a": "' + b"x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 10) + b'"}'
    for path in (AUTHORIZE, USAGE):
        r = hook.post(path, chunks=_chunks(big))
        assert r.status_code == 413 and shape(r)["code"] == "request_too_large"


@pytest.mark.parametrize("request_id", ["abc\n", "abc\r\n", "\nabc"])
def test_a_request_id_with_a_newline_is_refused(view, tenant, request_id):
    r = view(AUTHORIZE, orjson.dumps(ask(tenant, request_id=request_id)))
    assert r.status_code == 400 and set(r.json()["error"]["fields"]) == {"request_id"}
    r = view(USAGE, orjson.dumps(usage_event(tenant, request_id=request_id)))
    assert r.status_code == 400 and r.json()["error"]["fields"] == {
        "request_id": ["Must be 1-128 characters of A-Z a-z 0-9 . _ : -"]}
    r = view(USAGE, orjson.dumps({"events": [usage_event(tenant, request_id=request_id)]}))
    assert r.status_code == 400 and set(r.json()["error"]["fields"]["events"]["0"]) == {
        "request_id"}


def test_a_null_reservation_id_is_refused(view, tenant):
    r = view(USAGE, orjson.dumps({"events": [usage_event(tenant, reservation_id=None)]}))
    assert r.status_code == 400
    assert set(r.json()["error"]["fields"]["events"]["0"]) == {"reservation_id"}


def test_every_authorize_refusal_says_allowed_false(view, hook, tenant):
    answers = [view(AUTHORIZE, orjson.dumps(ask(tenant)), authorization="Bearer gw_nope"),
               hook.post(AUTHORIZE, json=ask(tenant), headers={"Authorization": "Bearer x"}),
               view(AUTHORIZE, b"{"),
               view(AUTHORIZE, orjson.dumps(ask(tenant, input_tokens=-1))),
               view(AUTHORIZE, orjson.dumps(ask(tenant)), host="evil.example")]
    assert [r.status_code for r in answers] == [401, 401, 400, 400, 400]
    for r in answers:
        body = r.json()
        assert body.pop("allowed") is False
        one_shape({"error": body["error"]})


def test_405_names_the_allowed_method(hook):
    for r in (hook.get(AUTHORIZE), hook.get(USAGE), hook.put(USAGE)):
        assert r.status_code == 405
        assert r.headers["Allow"] == "POST"
        assert shape(r)["code"] == "method_not_allowed"


def test_an_active_org_without_any_allocation_is_refused_no_allocation(view, tenant):
    org = OrganizationFactory(status=OrgStatus.ACTIVE)
    _, plaintext = api_key_create(org=org, name="k", actor="test")
    limiter_sync_pool(pool_id=tenant.pool.pk)
    r = view(AUTHORIZE, orjson.dumps(ask(tenant, api_key=plaintext)))
    assert (r.status_code, r.json()["error"]["code"]) == (403, "no_allocation")


def test_the_schema_bounds_token_counts_and_batches(operator_client):
    schemas = operator_client.get("/api/schema/", {"format": "json"}).json()["components"][
        "schemas"]
    for name in ("input_tokens", "output_tokens", "cached_input_tokens"):
        assert schemas["UsageEventRequest"]["properties"][name]["maximum"] == MAX_TOKENS
    for name in ("input_tokens", "max_output_tokens"):
        assert schemas["AuthorizeRequest"]["properties"][name]["maximum"] == MAX_TOKENS
    events = schemas["UsageBatchRequest"]["properties"]["events"]
    assert (events["minItems"], events["maxItems"]) == (1, MAX_EVENTS)




def test_a_key_created_for_an_org_without_any_allocation_is_known_at_once(
        view, tenant, django_capture_on_commit_callbacks):
    org = OrganizationFactory(status=OrgStatus.ACTIVE)
    with django_capture_on_commit_callbacks(execute=True):
        _, plaintext = api_key_create(org=org, name="k", actor="test")
    r = view(AUTHORIZE, orjson.dumps(ask(tenant, api_key=plaintext)))
    assert (r.status_code, r.json()["error"]["code"]) == (403, "no_allocation")


def test_postgresql_unreachable_is_a_503_not_a_500(view, tenant, limiter_clock, monkeypatch):
    from django.db import OperationalError

    from metering.api import hook

    def unreachable(*, events):
        raise OperationalError("connection refused")
    monkeypatch.setattr(hook, "usage_record", unreachable)
    r = view(USAGE, orjson.dumps(usage_event(tenant)))
    assert r.status_code == 503 and shape(r)["code"] == "database_unavailable"
    assert r.json()["error"]["retryable"] is True
