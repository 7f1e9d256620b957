"""After Redis restarts empty (here: a flush), every counter the engine keeps
is at least what PostgreSQL has recorded, whatever order authorize, usage and the periodic
sync arrive in. Before the fix, usage that reached the pool first created the day's counter
from its one event, and the rebuild's SET NX never loaded the day's recorded usage."""

from itertools import permutations

import pytest
from django.db.models import F, Sum

from billing.services.accounts import spend_cap_set
from billing.services.caps import month_to_date_micros
from metering.leases import leases_sweep
from metering.models import UsageEvent, UsageHourly
from orgs.services.api_keys import KeySlice, api_key_limits_set
from quotas.hook.gateway_tokens import gateway_token_cache_clear, gateway_token_create
from quotas.hook.reservations import reservation_id_issue
from quotas.hook.routing import pool_routes_reload
from quotas.limiter.clock import day_stamp, month_stamp
from quotas.limiter.schema import KEY, KEY_SLICE, pool_key
from quotas.publish import limiter_sync_pool
from tests.aio import limiter_authorize
from tests.hook import HookClient
from tests.metering.test_usage_ingest import USAGE, event
from tests.quotas.conftest import tenant_create

pytestmark = pytest.mark.django_db(transaction=True)  # the served app's threads read rows


@pytest.fixture
def hook(limiter):
    gateway_token_cache_clear()
    _, plaintext = gateway_token_create(name="edge-restart", actor="test")
    return HookClient(HTTP_AUTHORIZATION=f"Bearer {plaintext}")


@pytest.fixture
def report(hook, django_capture_on_commit_callbacks):
    def post(t, request_id, clock):
        reservation = reservation_id_issue(pool_id=t.pool.pk, org_id=t.org.pk,
                                           api_key_id=t.key.pk, request_id=request_id)
        with django_capture_on_commit_callbacks(execute=True):
            r = hook.post(USAGE, event(request_id, clock, reservation_id=reservation),
                          content_type="application/json")
        assert r.json()["recorded"] == 1
    return post


def _recorded_today(t, clock) -> int:
    start = clock.now().replace(hour=0, minute=0, second=0, microsecond=0)
    return UsageHourly.objects.filter(org=t.org, pool=t.pool, hour__gte=start).aggregate(
        total=Sum(F("input_tokens") + F("output_tokens")))["total"] or 0


def _counter(redis_client, t, name, stamp) -> int:
    return int(redis_client.get(pool_key(t.pool.pk, name, t.org.pk, stamp)) or 0)


def _key_day(redis_client, t, stamp) -> int:
    day, used = redis_client.hmget(pool_key(t.pool.pk, KEY.key_slice, t.key.pk), KEY_SLICE.day,
                                   KEY_SLICE.day_used)
    return int(used or 0) if (day or b"").decode() == stamp else 0


@pytest.mark.parametrize("order", list(permutations("AUS")), ids="".join)
def test_counters_after_a_flush_never_fall_below_what_postgres_recorded(
        limiter, limiter_clock, report, order):
    t = tenant_create(guaranteed_tps=10_000, burst_tps=10_000, daily_tokens=10**9,
                      max_concurrency=100)
    pool_routes_reload()
    spend_cap_set(org=t.org, cap_micros=10**12, thresholds=[100], actor="test")
    # The key has a slice of its own: its day counter must survive the flush too.
    api_key_limits_set(key=t.key, key_slice=KeySlice(daily_tokens=10**8),
                       default_service_tier="auto", actor="test")
    limiter_sync_pool(pool_id=t.pool.pk)
    for i in range(5):  # the day's usage so far: 5 x 400 tokens, priced into the month
        report(t, f"before-{i}", limiter_clock)

    limiter.flushdb()  # Redis restarts empty
    steps = {
        "A": lambda: limiter_authorize(pool_id=t.pool.pk, api_key=t.plaintext,
                                       request_id="after-a", input_tokens=1,
                                       max_output_tokens=1),
        "U": lambda: report(t, "after-u", limiter_clock),
        "S": lambda: limiter_sync_pool(pool_id=t.pool.pk),
    }
    for step in order:
        steps[step]()

    now = limiter_clock.now()
    recorded = _recorded_today(t, limiter_clock)
    assert _counter(limiter, t, KEY.day, day_stamp(now)) >= recorded
    assert _key_day(limiter, t, day_stamp(now)) >= recorded  # the key made all of it
    assert _counter(limiter, t, KEY.spend, month_stamp(now)) >= month_to_date_micros(
        org=t.org, now=now)
    # Money held by requests in flight: PostgreSQL records none, and a flush forgets none
    # that could be owed (the reservations went with it).


@pytest.mark.parametrize("order", list(permutations("HUSW")), ids="".join)
def test_leases_in_flight_across_a_flush_are_billed_once_from_their_usage(
        limiter, limiter_clock, hook, report, order):
    """A Redis restart loses the leases and their checkpoints (docs/faults.md): their
    heartbeats answer unknown_lease, the sweep finds nothing to bill, and the usage event the
    gateway still sends (from its spool) is billed once; new leases work at once."""
    t = tenant_create(guaranteed_tps=10_000, burst_tps=10_000, daily_tokens=10**9,
                      max_concurrency=2)
    pool_routes_reload()
    lease = {"lease": True, "gateway_process": "proc-1"}

    def admit(request_id):
        return hook.post("/api/gateway/v1/authorize", {
            "request_id": request_id, "api_key": t.plaintext, "model": t.pool.model,
            "input_tokens": 100, "max_output_tokens": 400, **lease},
            content_type="application/json").json()

    held = [admit(f"held-{i}")["lease"]["id"] for i in range(2)]
    hook.post("/api/gateway/v1/leases/heartbeat", {"gateway_process": "proc-1", "leases": [
        {"id": i, "delivered_output_tokens": 50} for i in held]}, content_type="application/json")
    limiter.flushdb()  # Redis restarts empty: the leases and their checkpoints are gone
    limiter_clock.advance(seconds=20)
    steps = {
        "H": lambda: hook.post("/api/gateway/v1/leases/heartbeat", {
            "gateway_process": "proc-1",
            "leases": [{"id": held[0], "delivered_output_tokens": 60}]},
            content_type="application/json").json(),
        "U": lambda: report(t, "held-0", limiter_clock),
        "S": lambda: limiter_sync_pool(pool_id=t.pool.pk),
        "W": leases_sweep,
    }
    results = {step: steps[step]() for step in order}
    assert [x.get("code") for x in results["H"]["leases"]] in (["unknown_lease"],
                                                               ["limiter_unavailable"])
    assert results["W"] == 0
    assert list(UsageEvent.objects.values_list("request_id", "status")) == \
        [("held-0", "completed")]
    # The slots went with Redis: two new leases are admitted (once the buckets, rebuilt
    # empty, refilled: a rebuild never lends what PostgreSQL cannot vouch for).
    limiter_clock.advance(seconds=10)
    answers = [admit(f"new-{i}") for i in range(2)]
    assert [a["allowed"] for a in answers] == [True, True], answers
