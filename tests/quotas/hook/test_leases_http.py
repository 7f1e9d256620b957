"""Leases over HTTP: authorize's lease, POST leases/heartbeat and leases/release, against real
PostgreSQL and Redis (the Django views; the WSGI fast path and the event loop serve the same
steps: test_on_loop.py)."""

import pytest

from quotas.hook import hook
from quotas.hook.gateway_tokens import gateway_token_cache_clear, gateway_token_create
from quotas.hook.routing import pool_routes_reload
from quotas.limiter.clock import clock
from quotas.limiter.connection import limiter_client
from quotas.limiter.schema import KEY, pool_key
from quotas.publish import limiter_sync_pool
from tests.hook import HookClient
from tests.quotas.hook.test_authorize import ask, post

pytestmark = pytest.mark.django_db(transaction=True)
HEARTBEAT, RELEASE = "/api/gateway/v1/leases/heartbeat", "/api/gateway/v1/leases/release"
PROCESS = "9f1c2d0e4b6a4f0c8e1d2b3a4c5d6e7f"


def lease_ask(tenant, request_id, **overrides):
    return ask(tenant, request_id=request_id, lease=True, gateway_process=PROCESS, **overrides)


def leases_post(client, url, leases, *, process=PROCESS):
    return client.post(url, {"gateway_process": process, "leases": [
        {"id": lease_id, "delivered_output_tokens": n} for lease_id, n in leases]},
        content_type="application/json")


def statuses(response):
    assert response.status_code == 200, response.json()
    return [item.get("code", item["status"]) for item in response.json()["leases"]]


@pytest.fixture
def gateway(tenant):
    gateway_token_cache_clear()
    pool_routes_reload()
    _, plaintext = gateway_token_create(name="edge-1", actor="test")
    return HookClient(plaintext)


@pytest.fixture(autouse=True)
def _fresh_beliefs():
    hook._key_owners.clear()  # the first lease of a key in a process is mapped apart


def test_a_lease_is_answered_and_renewed_and_released(gateway, tenant):
    first = post(gateway, lease_ask(tenant, "r1")).json()
    assert first["lease"] == {"id": first["reservation_id"], "ttl_ms": 15000,
                              "heartbeat_ms": 5000}
    second = post(gateway, lease_ask(tenant, "r2")).json()  # signed before the decision
    assert second["lease"]["id"] == second["reservation_id"]
    ids = [first["reservation_id"], second["reservation_id"]]
    r = leases_post(gateway, HEARTBEAT, [(ids[0], 10), (ids[1], 20)])
    assert r.json() == {"leases": [{"id": ids[0], "status": "renewed", "ttl_ms": 15000},
                                   {"id": ids[1], "status": "renewed", "ttl_ms": 15000}]}
    assert statuses(leases_post(gateway, RELEASE, [(ids[0], 70)])) == ["released"]
    assert statuses(leases_post(gateway, RELEASE, [(ids[0], 70)])) == ["released"]


def test_the_pools_lease_ttl_is_the_leases(gateway, tenant):
    tenant.pool.lease_ttl_seconds = 9
    tenant.pool.save()
    limiter_sync_pool(pool_id=tenant.pool.pk)
    pool_routes_reload()
    lease = post(gateway, lease_ask(tenant, "r1")).json()["lease"]
    assert (lease["ttl_ms"], lease["heartbeat_ms"]) == (9000, 3000)
    assert leases_post(gateway, HEARTBEAT, [(lease["id"], 1)]).json()["leases"][0]["ttl_ms"] \
        == 9000


def test_without_lease_the_answer_is_todays(gateway, tenant):
    body = post(gateway, ask(tenant, request_id="plain")).json()
    assert "lease" not in body
    assert "lease" not in post(gateway, lease_ask(tenant, "dry", dry_run=True)).json()
    ttl = limiter_client().pttl(pool_key(tenant.pool.pk, KEY.inflight, tenant.org.pk))
    assert ttl > 600_000  # the reservation TTL's slot, not a lease's


def test_release_frees_the_slot_for_the_next_request_at_once(gateway, tenant):
    ids = [post(gateway, lease_ask(tenant, f"r{i}")).json()["reservation_id"]
           for i in range(5)]
    assert post(gateway, lease_ask(tenant, "r5")).json()["error"]["code"] == \
        "concurrency_exceeded"
    leases_post(gateway, RELEASE, [(ids[0], 5)])
    assert post(gateway, lease_ask(tenant, "r5")).json()["allowed"] is True


def test_another_process_and_bad_ids_are_refused_per_lease(gateway, tenant):
    mine = post(gateway, lease_ask(tenant, "r1")).json()["reservation_id"]
    forged = mine[:-4] + "0000"
    r = leases_post(gateway, HEARTBEAT, [(mine, 1), ("rsv_nope", 1), (forged, 1), (mine, 100)],
                    process="another-process")
    assert statuses(r) == ["lease_not_yours", "unknown_lease", "unknown_lease",
                           "lease_not_yours"]
    assert statuses(leases_post(gateway, HEARTBEAT, [(mine, 5), (mine, 4), (mine, 71)])) == \
        ["renewed", "progress_backwards", "progress_beyond_reservation"]


def test_an_expired_lease_is_refused(gateway, tenant, limiter_clock):
    mine = post(gateway, lease_ask(tenant, "r1")).json()["reservation_id"]
    clock.advance(seconds=16)
    assert statuses(leases_post(gateway, HEARTBEAT, [(mine, 1)])) == ["lease_expired"]


@pytest.mark.parametrize("body", [
    {"leases": [{"id": "rsv_1", "delivered_output_tokens": 1}]},
    {"gateway_process": "p 1", "leases": [{"id": "rsv_1", "delivered_output_tokens": 1}]},
    {"gateway_process": "p1", "leases": []},
    {"gateway_process": "p1", "leases": [{"id": "rsv_1", "delivered_output_tokens": -1}]},
    {"gateway_process": "p1", "leases": [{"id": "rsv_1"}]},
    {"gateway_process": "p1", "leases": [{"id": 5, "delivered_output_tokens": 1}]},
    {"gateway_process": "p1", "leases": [{"id": "r", "delivered_output_tokens": 1}] * 1001},
    [],
])
def test_a_malformed_body_is_400_and_writes_nothing(gateway, tenant, body):
    mine = post(gateway, lease_ask(tenant, "r1")).json()["reservation_id"]
    if isinstance(body, dict) and body.get("leases") and body["leases"][0].get("id") == "rsv_1":
        body["leases"] = [{**body["leases"][0], "id": mine}, *body["leases"][1:]]
    before = limiter_client().hgetall(pool_key(tenant.pool.pk, KEY.reservation, "r1"))
    for url in (HEARTBEAT, RELEASE):
        r = gateway.post(url, body, content_type="application/json")
        assert r.status_code == 400
        assert r.json()["error"]["code"] in ("invalid_input", "malformed_request")
    assert limiter_client().hgetall(pool_key(tenant.pool.pk, KEY.reservation, "r1")) == before


@pytest.mark.parametrize("extra", [{"gateway_process": None}, {"gateway_process": "a b"},
                                   {"gateway_process": "x" * 65}, {"lease": "yes"}])
def test_authorize_refuses_a_malformed_lease_request(gateway, tenant, extra):
    body = {k: v for k, v in {**lease_ask(tenant, "r1"), **extra}.items() if v is not None}
    r = post(gateway, body)
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_input"
    assert not limiter_client().exists(pool_key(tenant.pool.pk, KEY.reservation, "r1"))


def test_a_heartbeat_needs_a_gateway_token(tenant):
    r = leases_post(HookClient(), HEARTBEAT, [("rsv_1", 1)])
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_gateway_token"
