"""The outbox against the local Stripe server over real HTTP."""

from datetime import UTC, date, datetime, timedelta

import pytest
from django.utils import timezone

from billing.models import BillingAccount, OutboxMessage, OutboxStatus
from billing.services import invoice_close_month, invoice_void, outbox_deliver, outbox_drain
from billing.services.outbox import MAX_ATTEMPTS
from orgs.models import AuditEvent
from tests.billing.conftest import usage_add
from tests.factories import OrganizationFactory

pytestmark = pytest.mark.django_db
OCT = date(2026, 10, 1)
NOV_2 = datetime(2026, 11, 2, tzinfo=UTC)


def _invoices(pool, n, operator):
    invoices = []
    for k in range(n):
        org = OrganizationFactory()
        usage_add(org=org, pool=pool, hour=datetime(2026, 10, 5, tzinfo=UTC),
                  i=1_000_000 * (k + 1), o=100_000, po=50_000)
        invoices.append(invoice_close_month(org=org, month=OCT, actor=operator, now=NOV_2)[0])
    return invoices


def _later(minutes=60 * 24):
    return timezone.now() + timedelta(minutes=minutes)


def _assert_in_stripe_once(stripe, invoice):
    invoice.refresh_from_db()
    account = BillingAccount.objects.get(org=invoice.org)
    remote = stripe.list("/v1/invoices", customer=account.stripe_customer_id)
    assert len(remote) == 1, "one Stripe invoice per our invoice"
    assert remote[0]["id"] == invoice.stripe_invoice_id
    assert remote[0]["status"] == "open" == invoice.stripe_status
    assert remote[0]["metadata"]["sluice_invoice_id"] == str(invoice.pk)
    amounts = sorted(line["amount"] for line in remote[0]["lines"]["data"])
    assert amounts == sorted(invoice.lines.values_list("amount_cents", flat=True))
    assert remote[0]["total"] == invoice.total_cents


def test_push_creates_customer_and_finalized_invoice_with_our_lines(stripe, pool,
                                                                     premium_price, operator):
    [invoice] = _invoices(pool, 1, operator)
    assert outbox_drain() == {"done": 1}
    _assert_in_stripe_once(stripe, invoice)
    assert len(stripe.list("/v1/customers")) == 1
    assert outbox_drain() == {}


def test_outbox_survives_stripe_stopped_mid_run(stripe, pool, premium_price, operator):
    invoices = _invoices(pool, 3, operator)
    assert outbox_drain(limit=1) == {"done": 1}
    stripe.stop()
    assert outbox_drain() == {"pending": 2}
    waiting = OutboxMessage.objects.filter(status=OutboxStatus.PENDING)
    assert all(m.attempts == 1 and "unavailable" in m.last_error for m in waiting)
    assert outbox_drain() == {}, "backing off: nothing is due right away"
    stripe.start()
    assert outbox_drain(now=_later()) == {"done": 2}
    for invoice in invoices:
        _assert_in_stripe_once(stripe, invoice)


def test_lost_responses_are_replayed_by_idempotency_key_not_sent_twice(stripe, pool,
                                                                       premium_price, operator):
    invoices = _invoices(pool, 2, operator)
    # Stripe acts on these requests but the answers never reach us.
    stripe.call("POST", "/_config/faults", json={"lose_responses": 4})
    for day in range(1, 11):
        outbox_drain(now=_later(minutes=day * 24 * 60))
        if not OutboxMessage.objects.filter(status=OutboxStatus.PENDING).exists():
            break
    assert set(OutboxMessage.objects.values_list("status", flat=True)) == {OutboxStatus.DONE}
    for invoice in invoices:
        _assert_in_stripe_once(stripe, invoice)
    stats = stripe.call("GET", "/_config/stats")
    assert stats["lost_responses"] == 4
    assert stats["replayed"] >= 4
    assert len(stripe.list("/v1/customers")) == 2
    # Each request acted once: a customer, an invoice, its items and a finalize per invoice.
    lines = sum(inv.lines.count() for inv in invoices)
    assert stats["executed"] == 2 + 2 + lines + 2


def test_rejected_call_is_a_dead_letter_until_an_operator_retries(stripe, pool, premium_price,
                                                                  operator, operator_client):
    [invoice] = _invoices(pool, 1, operator)
    BillingAccount.objects.update_or_create(org=invoice.org,
                                            defaults={"stripe_customer_id": "cus_gone"})
    assert outbox_drain() == {"dead": 1}
    message = OutboxMessage.objects.get(invoice=invoice)
    listed = operator_client.get("/api/v1/operator/billing/outbox/dead").json()["results"]
    assert [m["id"] for m in listed] == [message.pk]
    assert "refused" in listed[0]["last_error"]
    BillingAccount.objects.filter(org=invoice.org).update(stripe_customer_id="")
    response = operator_client.post(f"/api/v1/operator/billing/outbox/{message.pk}/retry")
    assert response.status_code == 200 and response.json()["status"] == "pending"
    assert AuditEvent.objects.filter(action="billing.outbox_retry").count() == 1
    assert outbox_drain() == {"done": 1}
    _assert_in_stripe_once(stripe, invoice)
    again = operator_client.post(f"/api/v1/operator/billing/outbox/{message.pk}/retry")
    assert again.status_code == 409


def test_gives_up_after_max_attempts(stripe, pool, premium_price, operator):
    [invoice] = _invoices(pool, 1, operator)
    OutboxMessage.objects.filter(invoice=invoice).update(attempts=MAX_ATTEMPTS - 1)
    stripe.stop()
    assert outbox_drain() == {"dead": 1}
    assert OutboxMessage.objects.get(invoice=invoice).last_error.startswith("gave up")
    stripe.start()


def test_void_of_a_pushed_invoice_voids_it_in_stripe(stripe, pool, premium_price, operator):
    [invoice] = _invoices(pool, 1, operator)
    assert outbox_drain() == {"done": 1}
    invoice_void(invoice=invoice, actor=operator, reason="wrong month")
    assert outbox_drain() == {"done": 1}
    invoice.refresh_from_db()
    remote = stripe.call("GET", f"/v1/invoices/{invoice.stripe_invoice_id}")
    assert remote["status"] == "void" == invoice.stripe_status


def test_void_before_the_push_waits_for_it_and_nothing_reaches_stripe(stripe, pool,
                                                                       premium_price, operator):
    [invoice] = _invoices(pool, 1, operator)
    invoice_void(invoice=invoice, actor=operator, reason="wrong month")
    void = OutboxMessage.objects.get(invoice=invoice, kind="invoice_void")
    assert outbox_deliver(message_id=void.pk) == "pending", "the void waits for the push"
    assert outbox_drain(now=_later()) == {"done": 2}
    assert stripe.list("/v1/invoices") == []


def test_admission_owes_stripe_a_customer_created_once(stripe, operator,
                                                       django_capture_on_commit_callbacks):
    from orgs.models import OrgStatus
    from orgs.services import org_admit

    org = OrganizationFactory(status=OrgStatus.APPROVED)
    with django_capture_on_commit_callbacks(execute=True):
        org_admit(org=org, actor=operator)
    message = OutboxMessage.objects.get(org=org, kind="customer_sync")
    assert message.status == OutboxStatus.DONE  # delivered by the after-commit kick
    customer_id = BillingAccount.objects.get(org=org).stripe_customer_id
    [remote] = stripe.list("/v1/customers")
    assert remote["id"] == customer_id
    assert remote["metadata"] == {"sluice_org_id": str(org.pk)}


@pytest.mark.django_db(transaction=True)
def test_concurrent_workers_deliver_a_message_once(stripe, operator):
    import threading

    from django.db import connection

    from tests.factories import PoolFactory

    # Committed for real here, so the after-commit kick runs at once: let it fail.
    stripe.stop()
    [invoice] = _invoices(PoolFactory(), 1, operator)
    message = OutboxMessage.objects.get(invoice=invoice)
    assert message.status == OutboxStatus.PENDING and message.attempts == 1
    stripe.start()
    stripe.call("DELETE", "/_config/reset")
    barrier, results, later = threading.Barrier(4), [], _later()

    def deliver():
        try:
            barrier.wait()
            results.append(outbox_deliver(message_id=message.pk, now=later))
        finally:
            connection.close()

    threads = [threading.Thread(target=deliver) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == ["done", "skipped", "skipped", "skipped"]
    stats = stripe.call("GET", "/_config/stats")
    # customer, invoice, its items, finalize: each executed once, nothing replayed.
    assert stats == {"executed": 3 + invoice.lines.count(), "replayed": 0, "lost_responses": 0}
    _assert_in_stripe_once(stripe, invoice)
