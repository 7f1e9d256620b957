"""Expired leases billed as interrupted usage (metering/leases.py), and replaced by their real
usage event: billed once, never lost, rollups following. Real PostgreSQL and Redis."""

from datetime import timedelta

import pytest
from django.db import connections
from django.db.models import Sum

from metering.leases import leases_sweep
from metering.models import UsageEvent, UsageEventKey, UsageHourly
from quotas.hook import hook
from quotas.hook.gateway_tokens import gateway_token_cache_clear, gateway_token_create
from quotas.limiter.clock import clock
from quotas.limiter.connection import limiter_client
from quotas.limiter.schema import KEY, pool_key
from quotas.publish import limiter_sync_pool
from tests.hook import HookClient
from tests.quotas.conftest import threads_race

pytestmark = pytest.mark.django_db(transaction=True)
PROCESS = "proc-1"


@pytest.fixture
def gateway(limiter):
    gateway_token_cache_clear()
    hook._key_owners.clear()
    _, plaintext = gateway_token_create(name="edge-1", actor="test")
    return HookClient(plaintext)


def admit(client, t, request_id, *, input_tokens=100, max_output_tokens=400) -> str:
    r = client.post("/api/gateway/v1/authorize", {
        "request_id": request_id, "api_key": t.plaintext, "model": t.pool.model,
        "input_tokens": input_tokens, "max_output_tokens": max_output_tokens, "lease": True,
        "gateway_process": PROCESS}, content_type="application/json").json()
    assert r["allowed"], r
    return r["lease"]["id"]


def heartbeat(client, leases, *, url="/api/gateway/v1/leases/heartbeat"):
    return client.post(url, {"gateway_process": PROCESS, "leases": [
        {"id": i, "delivered_output_tokens": n} for i, n in leases]},
        content_type="application/json").json()["leases"]


def usage(client, request_id, lease_id, *, output_tokens, started=None):
    start = started or clock.now() - timedelta(seconds=20)
    body = {"request_id": request_id, "reservation_id": lease_id, "input_tokens": 100,
            "output_tokens": output_tokens, "status": "completed",
            "started_at": start.isoformat(),
            "first_token_at": (start + timedelta(milliseconds=200)).isoformat(),
            "finished_at": (start + timedelta(seconds=2)).isoformat()}
    return client.post("/api/gateway/v1/usage", body, content_type="application/json").json()


def rollup(t) -> tuple[int, int, int, int]:
    sums = UsageHourly.objects.filter(org=t.org).aggregate(
        r=Sum("requests"), e=Sum("errors"), i=Sum("input_tokens"), o=Sum("output_tokens"))
    return sums["r"] or 0, sums["e"] or 0, sums["i"] or 0, sums["o"] or 0


def test_an_expired_lease_is_billed_from_its_checkpoint_and_frees_its_slot(
        gateway, t, django_capture_on_commit_callbacks):
    ids = [admit(gateway, t, f"r{i}") for i in range(5)]
    clock.advance(seconds=4)
    heartbeat(gateway, [(ids[0], 250)])
    clock.advance(seconds=12)  # r1..r4 expired 1 s ago; r0 lives 3 s more
    with django_capture_on_commit_callbacks(execute=True):  # the settlement, after the commit
        assert leases_sweep() == 4
        clock.advance(seconds=4)
        assert leases_sweep() == 1
    events = {e.request_id: e for e in UsageEvent.objects.all()}
    assert {e.status for e in events.values()} == {"interrupted"}
    r0 = events["r0"]
    assert (r0.input_tokens, r0.output_tokens, r0.premium_eligible, r0.first_token_at,
            r0.unreserved) == (100, 250, False, None, False)
    assert r0.finished_at - r0.started_at == timedelta(seconds=4)  # its last checkpoint
    assert rollup(t) == (5, 5, 500, 250)
    # Settled: every slot free, the bucket shares returned, nothing left to sweep.
    assert limiter_client().zcard(pool_key(t.pool.pk, KEY.leases)) == 0
    assert limiter_client().zcard(pool_key(t.pool.pk, KEY.inflight, t.org.pk)) == 0
    assert leases_sweep() == 0
    assert [x["code"] for x in heartbeat(gateway, [(ids[0], 260)])] == ["lease_expired"]


def test_the_real_event_replaces_the_interrupted_record(gateway, t):
    lease = admit(gateway, t, "r1")
    heartbeat(gateway, [(lease, 120)])
    clock.advance(seconds=16)
    assert leases_sweep() == 1
    assert rollup(t) == (1, 1, 100, 120)
    answer = usage(gateway, "r1", lease, output_tokens=380)
    assert answer["recorded"] == 1
    (event,) = UsageEvent.objects.all()
    assert (event.status, event.output_tokens) == ("completed", 380)
    assert rollup(t) == (1, 0, 100, 380)
    assert UsageEventKey.objects.get(request_id="r1").interrupted_started_at is None
    assert usage(gateway, "r1", lease, output_tokens=380)["duplicates"] == 1  # and only once


def test_a_gateways_interrupted_event_replaces_the_sweeps_only_with_more_output(gateway, t):
    lease = admit(gateway, t, "r1")
    heartbeat(gateway, [(lease, 120)])
    clock.advance(seconds=16)
    leases_sweep()
    started = clock.now() - timedelta(seconds=20)

    def interrupted(output_tokens):
        return gateway.post("/api/gateway/v1/usage", {
            "request_id": "r1", "reservation_id": lease, "input_tokens": 100,
            "output_tokens": output_tokens, "status": "interrupted",
            "started_at": started.isoformat(),
            "finished_at": (started + timedelta(seconds=2)).isoformat()},
            content_type="application/json").json()
    assert interrupted(100)["duplicates"] == 1  # the spool knew less: the sweep's stays
    assert UsageEvent.objects.get().output_tokens == 120
    assert interrupted(300)["recorded"] == 1
    assert (UsageEvent.objects.get().output_tokens, rollup(t)) == (300, (1, 1, 100, 300))
    assert usage(gateway, "r1", lease, output_tokens=310, started=started)["recorded"] == 1
    assert (UsageEvent.objects.get().status, rollup(t)) == ("completed", (1, 0, 100, 310))


def test_usage_before_expiry_leaves_nothing_to_sweep(gateway, t):
    lease = admit(gateway, t, "r1")
    heartbeat(gateway, [(lease, 300)], url="/api/gateway/v1/leases/release")
    assert usage(gateway, "r1", lease, output_tokens=300)["recorded"] == 1
    clock.advance(seconds=600)
    assert leases_sweep() == 0
    assert UsageEvent.objects.get().status == "completed"


def test_a_released_lease_whose_usage_never_came_is_billed_after_the_grace(gateway, t):
    lease = admit(gateway, t, "r1")
    heartbeat(gateway, [(lease, 90)], url="/api/gateway/v1/leases/release")
    clock.advance(seconds=30)
    assert leases_sweep() == 0  # the usage batch may still come
    clock.advance(seconds=100)
    assert leases_sweep() == 1
    assert UsageEvent.objects.get().output_tokens == 90


def test_an_interrupted_event_never_replaces_a_real_one(gateway, t):
    lease = admit(gateway, t, "r1")
    usage(gateway, "r1", lease, output_tokens=380)
    body = {"request_id": "r1", "reservation_id": lease, "input_tokens": 100,
            "output_tokens": 50, "status": "interrupted",
            "started_at": (clock.now() - timedelta(seconds=20)).isoformat(),
            "finished_at": (clock.now() - timedelta(seconds=19)).isoformat()}
    answer = gateway.post("/api/gateway/v1/usage", body,
                          content_type="application/json").json()
    assert answer["duplicates"] == 1
    assert UsageEvent.objects.get().output_tokens == 380


def test_a_late_usage_event_racing_the_sweep_is_billed_once(gateway, t, patient_redis):
    """Each round: a lease expires, and its real usage event and the sweep run at once. Either
    order ends with the real event alone, its rollup counted once."""
    t.allocation.max_concurrency = 50
    t.allocation.save()
    limiter_sync_pool(pool_id=t.pool.pk)
    rounds = 12
    leases = {f"r{i}": admit(gateway, t, f"r{i}", max_output_tokens=40) for i in range(rounds)}
    for lease in leases.values():
        heartbeat(gateway, [(lease, 10)])
    clock.advance(seconds=16)
    started = clock.now() - timedelta(seconds=20)

    def worker(i: int) -> None:
        try:
            if i == 0:
                for _ in range(rounds):
                    leases_sweep()
            else:
                for request_id, lease in leases.items():
                    usage(gateway, request_id, lease, output_tokens=40, started=started)
        finally:
            connections.close_all()

    threads_race(2, worker)
    leases_sweep()
    events = list(UsageEvent.objects.values_list("request_id", "status", "output_tokens"))
    assert sorted(events) == sorted((r, "completed", 40) for r in leases)
    assert rollup(t) == (rounds, 0, rounds * 100, rounds * 40)


def test_a_replacement_in_an_invoiced_month_is_billed_on_the_late_usage_supplement(t):
    from datetime import UTC, date, datetime

    from billing.models import LineKind
    from billing.services import invoice_bill_late_usage, invoice_close_month, invoice_paid
    from metering.usage import usage_record, usage_record_attributed
    from quotas.hook.inputs import UsageInput
    from quotas.hook.reservations import ReservationRef, reservation_id_issue

    started = datetime(2026, 10, 20, 9, tzinfo=UTC)
    interrupted = UsageInput("r1", None, 1_000, 400, "interrupted", started, None,
                             started + timedelta(seconds=3))
    usage_record_attributed(events=[interrupted],
                            refs={"r1": ReservationRef(t.pool.pk, t.org.pk, t.key.pk)})
    invoice = invoice_paid(invoice=invoice_close_month(
        org=t.org, month=date(2026, 10, 1), actor="test",
        now=datetime(2026, 11, 2, tzinfo=UTC))[0])
    real = UsageInput("r1", reservation_id_issue(pool_id=t.pool.pk, org_id=t.org.pk,
                                                 api_key_id=t.key.pk, request_id="r1"),
                      1_000, 2_400, "completed", started, started + timedelta(seconds=1),
                      started + timedelta(seconds=5))
    assert usage_record(events=[real])[0].result == "recorded"
    supplement = invoice_bill_late_usage(invoice=invoice, actor="test")
    lines = list(supplement.lines.all())
    tokens = {kind: sum(ln.quantity_tokens for ln in lines if ln.kind == kind)
              for kind in (LineKind.INPUT, LineKind.OUTPUT)}
    assert tokens == {LineKind.INPUT: 0, LineKind.OUTPUT: 2_000}  # the difference, once
