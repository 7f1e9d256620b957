"""Webhooks signed with Stripe's scheme (HMAC-SHA256 over "t.payload"), and dunning from a failed
payment through grace and suspension to restoration."""

import hashlib
import hmac
import json
import time
from datetime import UTC, date, datetime, timedelta

import pytest
from django.core import mail
from django.test import Client
from django.utils import timezone

from billing.models import (
    BillingAccount,
    Invoice,
    InvoiceStatus,
    StripeEvent,
    StripeEventStatus,
)
from billing.services import dunning_enforce, invoice_close_month
from orgs.models import AuditEvent, OrgStatus, Role, SuspensionReason
from tests.billing.conftest import WEBHOOK_SECRET, usage_add
from tests.factories import MembershipFactory, OrganizationFactory, UserFactory

URL = "/api/billing/stripe/webhook"


@pytest.fixture(autouse=True)
def webhook_secret(settings):
    settings.STRIPE_WEBHOOK_SECRET = WEBHOOK_SECRET
    settings.DUNNING_GRACE_DAYS = 7


def signed(payload: bytes, *, secret=WEBHOOK_SECRET, at: int | None = None) -> str:
    at = int(time.time()) if at is None else at
    digest = hmac.new(secret.encode(), f"{at}.".encode() + payload, hashlib.sha256).hexdigest()
    return f"t={at},v1={digest}"


def event(kind: str, invoice: Invoice, event_id: str = "evt_1") -> bytes:
    return json.dumps({"id": event_id, "object": "event", "type": kind, "data": {"object": {
        "id": invoice.stripe_invoice_id, "object": "invoice",
        "metadata": {"sluice_invoice_id": str(invoice.pk)}}}}).encode()


def post(payload: bytes, signature: str | None = None):
    headers = {} if signature is None else {"HTTP_STRIPE_SIGNATURE": signature}
    return Client().post(URL, data=payload, content_type="application/json", **headers)


@pytest.fixture
def open_invoice(db, pool, operator):
    org = OrganizationFactory(name="Acme")
    MembershipFactory(org=org, role=Role.BILLING, user=UserFactory(username="pay@acme.test"))
    MembershipFactory(org=org, role=Role.DEVELOPER, user=UserFactory(username="dev@acme.test"))
    usage_add(org=org, pool=pool, hour=datetime(2026, 10, 5, tzinfo=UTC), i=2_000_000)
    invoice, _ = invoice_close_month(org=org, month=date(2026, 10, 1), actor=operator,
                                     now=datetime(2026, 11, 2, tzinfo=UTC))
    Invoice.objects.filter(pk=invoice.pk).update(stripe_invoice_id="in_test_1")
    invoice.refresh_from_db()
    return invoice


@pytest.mark.parametrize("signature", [
    None,
    "t=1,v1=deadbeef",
    "garbage",
    signed(b"{}"),  # a valid signature of another payload
])
def test_forged_webhooks_are_refused_and_nothing_is_stored(open_invoice, signature):
    response = post(event("invoice.paid", open_invoice), signature)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_signature"
    assert not StripeEvent.objects.exists()
    open_invoice.refresh_from_db()
    assert open_invoice.status == InvoiceStatus.OPEN


def test_wrong_secret_and_stale_timestamp_are_refused(open_invoice):
    payload = event("invoice.paid", open_invoice)
    assert post(payload, signed(payload, secret="whsec_other")).status_code == 400
    stale = int(time.time()) - 3600
    assert post(payload, signed(payload, at=stale)).status_code == 400
    assert not StripeEvent.objects.exists()


def test_replayed_event_is_stored_and_processed_once(open_invoice,
                                                     django_capture_on_commit_callbacks):
    payload = event("invoice.paid", open_invoice)
    with django_capture_on_commit_callbacks(execute=True):
        first = post(payload, signed(payload))
    with django_capture_on_commit_callbacks(execute=True) as replay_callbacks:
        second = post(payload, signed(payload))
    assert first.json() == {"received": True, "duplicate": False, "status": "received"}
    assert second.json() == {"received": True, "duplicate": True, "status": "processed"}
    assert replay_callbacks == []
    stored = StripeEvent.objects.get()
    assert (stored.event_id, stored.status) == ("evt_1", StripeEventStatus.PROCESSED)
    open_invoice.refresh_from_db()
    assert open_invoice.status == InvoiceStatus.PAID
    assert AuditEvent.objects.filter(action="invoice.paid").count() == 1


def test_unknown_types_are_ignored_and_unmatched_invoices_fail_visibly(
        open_invoice, django_capture_on_commit_callbacks):
    other = json.dumps({"id": "evt_2", "type": "customer.created", "data": {}}).encode()
    stranger = json.dumps({"id": "evt_3", "type": "invoice.paid",
                           "data": {"object": {"id": "in_unknown"}}}).encode()
    with django_capture_on_commit_callbacks(execute=True):
        post(other, signed(other))
        post(stranger, signed(stranger))
    statuses = dict(StripeEvent.objects.values_list("event_id", "status"))
    assert statuses == {"evt_2": "ignored", "evt_3": "failed"}
    assert "in_unknown" in StripeEvent.objects.get(event_id="evt_3").error


def test_dunning_failure_grace_suspension_and_payment_restores(
        open_invoice, django_capture_on_commit_callbacks):
    org = open_invoice.org
    failed = event("invoice.payment_failed", open_invoice, "evt_fail")
    with django_capture_on_commit_callbacks(execute=True):
        assert post(failed, signed(failed)).status_code == 200
    account = BillingAccount.objects.get(org=org)
    assert account.grace_until is not None
    grace_days = (account.grace_until - account.payment_failed_at)
    assert grace_days == timedelta(days=7)
    # Billing members are told (owner/billing roles only; a developer is not).
    assert [m.to for m in mail.outbox] == [["pay@acme.test"]]
    assert "Payment failed" in mail.outbox[0].subject

    # Still in grace: nothing happens.
    assert dunning_enforce(now=timezone.now() + timedelta(days=6)) == 0
    org.refresh_from_db()
    assert org.status == OrgStatus.ACTIVE

    # A second failure (Stripe retried the charge) does not extend the grace.
    again = event("invoice.payment_failed", open_invoice, "evt_fail_2")
    with django_capture_on_commit_callbacks(execute=True):
        post(again, signed(again))
    assert BillingAccount.objects.get(org=org).grace_until == account.grace_until

    with django_capture_on_commit_callbacks(execute=True):
        assert dunning_enforce(now=account.grace_until + timedelta(minutes=1)) == 1
    org.refresh_from_db()
    assert (org.status, org.suspension_reason) == (OrgStatus.SUSPENDED,
                                                   SuspensionReason.PAYMENT)
    assert "suspended" in mail.outbox[-1].subject

    paid = event("invoice.paid", open_invoice, "evt_paid")
    with django_capture_on_commit_callbacks(execute=True):
        post(paid, signed(paid))
    org.refresh_from_db()
    assert (org.status, org.suspension_reason) == (OrgStatus.ACTIVE, "")
    assert BillingAccount.objects.get(org=org).grace_until is None
    actions = list(AuditEvent.objects.filter(org=org).order_by("id")
                   .values_list("action", "actor_label"))
    assert actions[1:] == [
        ("billing.dunning_start", "stripe"),
        ("org.suspend", "celery:dunning_enforce"),
        ("invoice.paid", "stripe"),
        ("billing.dunning_end", "stripe"),
        ("org.restore", "stripe"),
    ]


def test_operator_suspension_is_not_lifted_by_a_payment(
        open_invoice, operator, django_capture_on_commit_callbacks):
    from orgs.services import org_suspend

    org_suspend(org=open_invoice.org, actor=operator, reason="abuse")
    paid = event("invoice.paid", open_invoice)
    with django_capture_on_commit_callbacks(execute=True):
        post(paid, signed(paid))
    open_invoice.org.refresh_from_db()
    assert open_invoice.org.suspension_reason == SuspensionReason.OPERATOR


def test_operator_retries_a_failed_event_once_it_can_succeed(
        open_invoice, operator_client, django_capture_on_commit_callbacks):
    Invoice.objects.filter(pk=open_invoice.pk).update(stripe_invoice_id="")
    payload = json.dumps({"id": "evt_late", "type": "invoice.paid",
                          "data": {"object": {"id": "in_test_1"}}}).encode()
    with django_capture_on_commit_callbacks(execute=True):
        post(payload, signed(payload))
    stored = StripeEvent.objects.get(event_id="evt_late")
    assert stored.status == StripeEventStatus.FAILED
    failed = operator_client.get("/api/v1/operator/billing/stripe-events",
                                 {"status": "failed"}).json()["results"]
    assert [e["event_id"] for e in failed] == ["evt_late"]
    Invoice.objects.filter(pk=open_invoice.pk).update(stripe_invoice_id="in_test_1")
    retried = operator_client.post(f"/api/v1/operator/billing/stripe-events/{stored.pk}/retry")
    assert retried.json()["status"] == "processed"
    open_invoice.refresh_from_db()
    assert open_invoice.status == InvoiceStatus.PAID
    retry = AuditEvent.objects.get(action="billing.stripe_event_retry")
    assert (retry.before["status"], retry.after["status"]) == ("failed", "processed")
    again = operator_client.post(f"/api/v1/operator/billing/stripe-events/{stored.pk}/retry")
    assert again.status_code == 409


def test_completed_setup_checkout_ticks_the_payment_method_check(
        db, django_capture_on_commit_callbacks):
    from rollout.models import ApplicationCheck, CheckItem
    from tests.waitlist import applicant_org, submit

    org, owner = applicant_org("Waitlisted")
    application = submit(org, owner)
    BillingAccount.objects.create(org=org, stripe_customer_id="cus_waiting")
    payload = json.dumps({"id": "evt_setup", "type": "checkout.session.completed",
                          "data": {"object": {"id": "cs_1", "object": "checkout.session",
                                              "mode": "setup", "status": "complete",
                                              "customer": "cus_waiting"}}}).encode()
    with django_capture_on_commit_callbacks(execute=True):
        assert post(payload, signed(payload)).status_code == 200
    check = ApplicationCheck.objects.get(application=application,
                                         item=CheckItem.PAYMENT_METHOD_ON_FILE)
    assert (check.done, check.done_by_label) == (True, "stripe")
    assert StripeEvent.objects.get(event_id="evt_setup").status == StripeEventStatus.PROCESSED
