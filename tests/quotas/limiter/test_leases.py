"""Leases against real Redis: authorize's lease, heartbeat and release (lease_update.lua), and
the sweep's claim of due leases (lease_expire.lua)."""

import threading
import time

import pytest

from quotas.limiter.clock import clock
from quotas.limiter.connection import limiter_client
from quotas.limiter.engine import (
    LEASE_CLAIM_MS,
    LEASE_RELEASE_GRACE_MS,
    LeaseNamed,
    limiter_lease_map,
    limiter_leases_expire,
    limiter_leases_update,
    limiter_settle,
)
from quotas.limiter.schema import KEY, POOL, Settlement, pool_key
from quotas.models import LEASE_TTL_DEFAULT_SECONDS
from quotas.publish import limiter_sync_pool
from tests.aio import limiter_authorize, on_loop
from tests.quotas.conftest import threads_race

pytestmark = pytest.mark.django_db
GW, OTHER = "gw-process-a", "gw-process-b"


def admit(t, request_id, *, lease=GW, max_output_tokens=100, **kwargs):
    """The hook signs a lease's id for the org and key it expects (tests: any signature)."""
    return limiter_authorize(pool_id=t.pool.pk, api_key=t.plaintext, request_id=request_id,
                             input_tokens=10, max_output_tokens=max_output_tokens,
                             lease_owner=lease, lease_id=f"sig-{request_id}",
                             lease_for=f"{t.org.pk}.{t.key.pk}", **kwargs)


def heartbeat(t, leases, *, owner=GW, release=False):
    """leases: (request_id, progress); answers (status, ttl_ms)."""
    named = [LeaseNamed(f"sig-{r}", t.org.pk, t.key.pk, progress) for r, progress in leases]
    return [(a.status, a.ttl_ms) for a in on_loop(limiter_leases_update(
        pool_id=t.pool.pk, owner=owner, release=release, leases=named))]


def test_a_lease_lives_the_pools_lease_ttl_and_an_old_reservation_today_s(tenant, settings):
    settings.RESERVATION_TTL_SECONDS = 600
    assert admit(tenant, "old", lease="").lease_ttl_ms == 0
    d = admit(tenant, "r1")
    assert d.outcome == "allowed" and d.lease_ttl_ms == LEASE_TTL_DEFAULT_SECONDS * 1000
    for i in range(2, 5):
        admit(tenant, f"r{i}")
    assert admit(tenant, "r5").outcome == "concurrency_exceeded"
    clock.advance(seconds=LEASE_TTL_DEFAULT_SECONDS)  # unrenewed: the four leases' slots free
    assert [admit(tenant, f"n{i}", lease="").outcome for i in range(5)] == \
        ["allowed"] * 4 + ["concurrency_exceeded"]  # the old reservation still holds its own


def test_a_lease_gets_the_ttl_asked_and_its_heartbeat_the_pools_published_one(tenant):
    tenant.pool.lease_ttl_seconds = 6
    tenant.pool.save()
    limiter_sync_pool(pool_id=tenant.pool.pk)
    assert admit(tenant, "r1", lease_ttl_ms=6000).lease_ttl_ms == 6000
    assert heartbeat(tenant, [("r1", 5)]) == [("renewed", 6000)]


def test_a_heartbeat_renews_so_the_slot_stays_held(tenant):
    for i in range(5):
        admit(tenant, f"r{i}")
    for _ in range(3):
        clock.advance(seconds=10)
        assert heartbeat(tenant, [(f"r{i}", 10) for i in range(5)]) == [("renewed", 15000)] * 5
        assert admit(tenant, "x").outcome == "concurrency_exceeded"


def test_release_frees_the_slot_at_once_and_is_idempotent(tenant):
    for i in range(5):
        admit(tenant, f"r{i}")
    assert heartbeat(tenant, [("r0", 40)], release=True) == [("released", 0)]
    assert heartbeat(tenant, [("r0", 40)], release=True) == [("released", 0)]
    assert admit(tenant, "x").outcome == "allowed"
    assert heartbeat(tenant, [("r0", 40)]) == [("unknown_lease", 0)]  # nothing left to renew


def test_each_lease_is_answered_alone(tenant):
    admit(tenant, "mine", max_output_tokens=100)
    admit(tenant, "no_lease", lease="")
    admit(tenant, "theirs", lease=OTHER)
    admit(tenant, "dead")
    clock.advance(seconds=5)
    assert heartbeat(tenant, [("mine", 50)]) == [("renewed", 15000)]
    clock.advance(seconds=11)  # `dead` was admitted 16 s ago and never renewed
    answers = heartbeat(tenant, [("mine", 49), ("mine", 101), ("nobody", 1), ("no_lease", 1),
                                 ("theirs", 1), ("dead", 2), ("mine", 100)])
    assert [status for status, _ in answers] == [
        "progress_backwards", "progress_beyond_reservation", "unknown_lease", "unknown_lease",
        "lease_not_yours", "lease_expired", "renewed"]


def test_a_lease_id_leads_to_its_lease_only_when_signed_for_its_org_and_key(tenant):
    d = limiter_authorize(pool_id=tenant.pool.pk, api_key=tenant.plaintext, request_id="r1",
                          input_tokens=1, max_output_tokens=10, lease_owner=GW,
                          lease_id="sig-r1", lease_for=f"{tenant.org.pk}.999")
    assert d.lease_mapped == 0 and admit(tenant, "r2").lease_mapped == 1
    assert heartbeat(tenant, [("r1", 1)]) == [("unknown_lease", 0)]
    on_loop(limiter_lease_map(pool_id=tenant.pool.pk, request_id="r1", signature="sig-r1"))
    assert heartbeat(tenant, [("r1", 1)]) == [("renewed", 15000)]
    # An id naming another org or key than the lease's leads nowhere.
    assert [a.status for a in on_loop(limiter_leases_update(
        pool_id=tenant.pool.pk, owner=GW, release=False,
        leases=[LeaseNamed("sig-r1", tenant.org.pk + 1, tenant.key.pk, 2),
                LeaseNamed("sig-r1", tenant.org.pk, 0, 2)]))] == ["unknown_lease"] * 2


def test_without_max_output_tokens_progress_has_no_bound_but_the_inputs(tenant):
    tenant.pool.output_estimate_default = 50
    tenant.pool.save()
    limiter_sync_pool(pool_id=tenant.pool.pk)
    assert admit(tenant, "r1", max_output_tokens=None).reserved_output_tokens == 64  # the floor
    assert heartbeat(tenant, [("r1", 5_000_000)]) == [("renewed", 15000)]


def test_the_sweep_claims_due_leases_with_their_checkpoint_once(tenant):
    admit(tenant, "r1")
    admit(tenant, "r2")
    admit(tenant, "plain", lease="")
    started = clock.now_ms()
    clock.advance(seconds=2)
    heartbeat(tenant, [("r1", 30)])
    assert limiter_leases_expire(pool_id=tenant.pool.pk) == []
    clock.advance(seconds=LEASE_TTL_DEFAULT_SECONDS)
    heartbeat(tenant, [("r2", 7)])  # too late: r2 expired 2 s ago
    claimed = {c.request_id: c for c in limiter_leases_expire(pool_id=tenant.pool.pk)}
    assert set(claimed) == {"r1", "r2"}
    c = claimed["r1"]
    assert (c.org_id, c.api_key_id, c.input_tokens, c.output_tokens) == \
        (tenant.org.pk, tenant.key.pk, 10, 30)
    assert (c.started_ms, c.progress_ms) == (started, started + 2000)
    assert claimed["r2"].output_tokens == 0
    assert limiter_leases_expire(pool_id=tenant.pool.pk) == []  # claimed: not twice
    assert heartbeat(tenant, [("r1", 31)]) == [("lease_expired", 0)]
    # Settled: gone from the pool's leases. Not settled (the sweep died): claimed again.
    limiter_settle(pool_id=tenant.pool.pk, settlements=[
        Settlement(request_id="r1", org_id=tenant.org.pk, input_tokens=10, output_tokens=30)])
    clock.advance(milliseconds=LEASE_CLAIM_MS)
    assert [c.request_id for c in limiter_leases_expire(pool_id=tenant.pool.pk)] == ["r2"]


def test_a_released_lease_without_usage_is_billed_after_the_grace(tenant):
    admit(tenant, "r1")
    admit(tenant, "r2")
    heartbeat(tenant, [("r1", 60), ("r2", 70)], release=True)
    limiter_settle(pool_id=tenant.pool.pk, settlements=[  # r2's usage arrives
        Settlement(request_id="r2", org_id=tenant.org.pk, input_tokens=10, output_tokens=70)])
    clock.advance(seconds=LEASE_TTL_DEFAULT_SECONDS + 1)
    assert limiter_leases_expire(pool_id=tenant.pool.pk) == []
    clock.advance(milliseconds=LEASE_RELEASE_GRACE_MS)
    assert [(c.request_id, c.output_tokens) for c in
            limiter_leases_expire(pool_id=tenant.pool.pk)] == [("r1", 60)]
    assert limiter_client().zcard(pool_key(tenant.pool.pk, KEY.leases)) == 1  # until settled


def test_the_claim_is_bounded_and_oldest_first(tenant):
    for i in range(5):
        admit(tenant, f"r{i}")
        clock.advance(milliseconds=10)
    clock.advance(seconds=LEASE_TTL_DEFAULT_SECONDS)
    assert [c.request_id for c in limiter_leases_expire(pool_id=tenant.pool.pk, limit=2)] == \
        ["r0", "r1"]


def test_renewal_racing_expiry_exactly_one_wins(tenant, patient_redis):
    """Real time, a 40 ms TTL: renewers heartbeat at random intervals (some too late) while a
    sweeper claims. A lease the sweeper claimed is never renewed after the claim, and at the
    end every lease was either claimed or is still renewable, never both."""
    tenant.allocation.max_concurrency = 200
    clock.unfreeze()
    tenant.allocation.save()
    limiter_sync_pool(pool_id=tenant.pool.pk)
    limiter_client().hset(pool_key(tenant.pool.pk, KEY.pool), POOL.lease_ttl, 40)
    ids = [f"r{i}" for i in range(40)]
    for request_id in ids:  # 40 x 20 tokens: within the guaranteed bucket
        assert admit(tenant, request_id, max_output_tokens=10).allowed
    claims, renewals, stop = [], [], threading.Event()

    def worker(i: int) -> None:
        if i == 0:
            while not stop.is_set():
                start = time.monotonic()
                got = limiter_leases_expire(pool_id=tenant.pool.pk)
                claims.extend((c.request_id, start, time.monotonic()) for c in got)
            return
        mine = ids[i - 1::4]
        deadline = time.monotonic() + 1.0
        progress = 0
        while time.monotonic() < deadline:
            progress = min(progress + 1, 10)
            start = time.monotonic()
            answers = heartbeat(tenant, [(r, progress) for r in mine])
            end = time.monotonic()
            renewals.extend((r, status, start, end) for r, (status, _) in zip(mine, answers,
                                                                               strict=True))
            time.sleep(((i * 7 + progress * 13) % 50) / 1000)  # 0-49 ms: some too late
        if i == 4:
            time.sleep(0.1)
            stop.set()

    threads_race(5, worker)
    claimed = {}
    for request_id, _, end in claims:
        assert request_id not in claimed  # claimed once
        claimed[request_id] = end
    late = [(r, s) for r, s, start, _ in renewals
            if r in claimed and start > claimed[r] and s == "renewed"]
    assert late == []
    assert claimed  # the race did happen both ways
    assert any(s == "renewed" for _, s, _, _ in renewals)
    final = dict(zip(ids, heartbeat(tenant, [(r, 10) for r in ids]), strict=True))
    assert {r for r in claimed if final[r][0] != "lease_expired"} == set()
