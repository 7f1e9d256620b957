"""The whole path, application to traffic, and the emails sent along the way."""

from datetime import timedelta

import pytest
from django.core import mail
from django.utils import timezone

from orgs.models import ApplicationState, AuditEvent, OrgStatus, SuspensionReason
from orgs.services import api_key_create, org_restore, org_suspend
from orgs.services.applications import (
    application_decide,
    application_note_add,
    application_reviewer_assign,
    application_update,
)
from quotas.models import Allocation, AllocationStatus, OrgPoolPreference
from quotas.waves import waves_open_due
from sluice.errors import Unprocessable
from tests.factories import PoolFactory, RolloutWaveFactory
from tests.waitlist import applicant_org, submit, tick_required

pytestmark = pytest.mark.django_db


def admitted_org_api_key(*, org, owner) -> str:
    """The admitted org creates its first API key, the one a journey posts to
    /api/gateway/v1/authorize (expecting "allow")."""
    _, plaintext = api_key_create(org=org, name="first key", actor=owner)
    return plaintext


def test_apply_vet_approve_wave_opens_org_active_with_allocation_and_limits(
    operator, published_limits, django_capture_on_commit_callbacks,
):
    pool = PoolFactory(region="us-east", capacity_tps=1_000)
    org, owner = applicant_org("Acme")
    with django_capture_on_commit_callbacks(execute=True):
        app = submit(org, owner)
        application_reviewer_assign(application=app, reviewer=operator, actor=operator)
        tick_required(app, operator)
        application_note_add(application=app, body="Called the CTO.", actor=operator)
        application_decide(application=app, decision="approve", reason="voice, fits",
                           actor=operator)
    org.refresh_from_db()
    assert org.status == OrgStatus.APPROVED
    assert OrgPoolPreference.objects.get(org=org).pool == pool  # only pool in its region
    wave = RolloutWaveFactory(pool=pool, opens_at=timezone.now() - timedelta(minutes=1),
                              capacity_tps=2_000, guaranteed_tps=500, burst_tps=1_000)
    published_limits.clear()
    with django_capture_on_commit_callbacks(execute=True):
        assert waves_open_due() == 1

    org.refresh_from_db()
    app.refresh_from_db()
    wave.refresh_from_db()
    pool.refresh_from_db()
    assert (org.status, app.state, wave.state, wave.admitted_count) == (
        OrgStatus.ACTIVE, ApplicationState.ADMITTED, "open", 1)
    assert pool.capacity_tps == 3_000
    allocation = Allocation.objects.get(org=org, pool=pool, status=AllocationStatus.ACTIVE)
    assert (allocation.guaranteed_tps, allocation.burst_tps) == (500, 1_000)
    assert org.pk in published_limits
    actions = list(AuditEvent.objects.filter(org=org).order_by("id")
                   .values_list("action", flat=True))
    assert actions == [
        "org.pool_preference_set", "application.submit", "org.review_start",
        "application.assign", "application.check", "application.check", "application.check",
        "application.note", "org.approve", "application.approve", "org.admit",
        "application.admitted", "allocation.grant",
    ]
    assert admitted_org_api_key(org=org, owner=owner).startswith("sk_")


def _subjects() -> list[str]:
    return [m.subject for m in mail.outbox]


def test_each_status_email_is_sent_once_after_commit(
    operator, django_capture_on_commit_callbacks,
):
    pool = PoolFactory(region="us-east")
    org, owner = applicant_org("Acme")
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        app = submit(org, owner)
    assert mail.outbox == []  # nothing before the commit
    for callback in callbacks:
        callback()
    assert _subjects() == ["We received Acme's application"]
    assert set(mail.outbox[0].to) == {"ada@acme.example", f"owner@{org.slug}.test"}
    html, mimetype = mail.outbox[0].alternatives[0]
    assert mimetype == "text/html" and "<strong>Acme</strong>" in html

    with django_capture_on_commit_callbacks(execute=True):
        application_decide(application=app, decision="request_info", reason="vague",
                           shared_reason="Which languages do you serve?", actor=operator)
    assert "Which languages do you serve?" in mail.outbox[-1].body
    with django_capture_on_commit_callbacks(execute=True):
        application_update(application=app, data={"expected_peak_tps": 300}, actor=owner,
                           response="English and German.")
        tick_required(app, operator)
        application_decide(application=app, decision="approve", reason="ok", actor=operator)
    assert "Position: 1 of 1" in mail.outbox[-1].body
    assert "not yet scheduled" in mail.outbox[-1].body

    RolloutWaveFactory(pool=pool, opens_at=timezone.now(), name="GA")
    with django_capture_on_commit_callbacks(execute=True):
        waves_open_due()
    assert "Create an API key" in mail.outbox[-1].body
    with django_capture_on_commit_callbacks(execute=True):
        org_suspend(org=org, actor="stripe", cause=SuspensionReason.PAYMENT)
    assert "payment failed" in mail.outbox[-1].body
    with django_capture_on_commit_callbacks(execute=True):
        org_restore(org=org, actor="stripe")
    assert _subjects() == [
        "We received Acme's application",
        "Acme's application: we need more information",
        "Acme is approved and on the waitlist",
        "Acme is admitted: create an API key to start",
        "Acme's access is suspended",
        "Acme's access is restored",
    ]


def test_rejection_email_carries_the_shared_reason_not_the_internal_one(
    operator, django_capture_on_commit_callbacks,
):
    org, owner = applicant_org("Acme")
    app = submit(org, owner)
    with django_capture_on_commit_callbacks(execute=True):
        application_decide(application=app, decision="reject", reason="internal: looks shady",
                           shared_reason="We cannot serve crypto trading bots.", actor=operator)
    assert len(mail.outbox) == 1
    assert "We cannot serve crypto trading bots." in mail.outbox[0].body
    assert "shady" not in mail.outbox[0].body


def test_a_rolled_back_decision_sends_nothing(operator, django_capture_on_commit_callbacks):
    org, owner = applicant_org("Acme")
    app = submit(org, owner)
    with (django_capture_on_commit_callbacks(execute=True),
          pytest.raises(Unprocessable, match="checklist")):
        application_decide(application=app, decision="approve", reason="x", actor=operator)
    assert mail.outbox == []


def test_an_operator_admitting_by_the_lifecycle_button_admits_the_application_too(operator):
    """Not only waves: whatever path admits the org, its approved application follows."""
    from orgs.services import org_transition

    pool = PoolFactory(region="us-east")
    org, owner = applicant_org("Acme")
    app = submit(org, owner)
    tick_required(app, operator)
    application_decide(application=app, decision="approve", reason="ok", actor=operator,
                       pool_id=pool.pk)
    org_transition(org=org, action="admit", actor=operator)
    app.refresh_from_db()
    org.refresh_from_db()
    assert (org.status, app.state) == (OrgStatus.ACTIVE, ApplicationState.ADMITTED)
    assert list(AuditEvent.objects.filter(org=org).order_by("id")
                .values_list("action", flat=True))[-2:] == ["org.admit", "application.admitted"]
