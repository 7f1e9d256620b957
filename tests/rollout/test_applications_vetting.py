"""Applying, re-applying, the checklist and decisions, straight against the services."""

from datetime import timedelta

import pytest
from django.utils import timezone

from orgs.models import AuditEvent, OrgStatus
from orgs.services import org_reject
from rollout.applications import (
    application_check_set,
    application_decide,
    application_reviewer_assign,
    applications_decide_bulk,
)
from rollout.models import Application, ApplicationCheck, ApplicationState, OrgPoolPreference
from sluice.errors import Conflict, DomainError, IllegalTransition, Unprocessable
from tests.factories import OrganizationFactory, PoolFactory, UserFactory
from tests.waitlist import applicant_org, submit, tick_required

pytestmark = pytest.mark.django_db


def test_submission_creates_the_checklist_and_picks_the_only_pool_of_the_region(operator):
    pool = PoolFactory(region="eu-west")
    PoolFactory(region="us-east")
    org, owner = applicant_org()
    app = submit(org, owner, preferred_region="eu-west")
    assert app.state == ApplicationState.SUBMITTED
    assert sorted(ApplicationCheck.objects.filter(application=app).values_list(
        "item", flat=True)) == ["contact_reachable", "identity_verified",
                                "payment_method_on_file", "use_case_acceptable"]
    assert OrgPoolPreference.objects.get(org=org).pool == pool


def test_no_pool_is_guessed_when_the_region_is_ambiguous(operator):
    PoolFactory(region="us-east")
    PoolFactory(region="us-east")
    org, owner = applicant_org()
    submit(org, owner)
    assert not OrgPoolPreference.objects.filter(org=org).exists()


@pytest.mark.parametrize(("field", "value"), [
    ("website", "not a url"), ("country", "Germany"), ("contact_email", "nope"),
    ("use_case", "crypto"), ("latency_sensitivity", "fast"), ("expected_peak_tps", 0),
    ("expected_daily_tokens", -5), ("legal_name", ""), ("use_case_description", ""),
])
def test_invalid_fields_are_named_and_nothing_is_written(field, value):
    org, owner = applicant_org()
    with pytest.raises(DomainError) as exc:
        submit(org, owner, **{field: value})
    assert exc.value.code == "invalid_application" and exc.value.status == 400
    assert field in exc.value.fields
    assert not Application.objects.exists() and not AuditEvent.objects.exists()


def test_one_open_application_per_org():
    org, owner = applicant_org()
    submit(org, owner)
    with pytest.raises(Conflict) as exc:
        submit(org, owner)
    assert exc.value.code == "application_open"


def test_active_orgs_do_not_apply():
    org = OrganizationFactory(status=OrgStatus.ACTIVE)
    with pytest.raises(Conflict) as exc:
        submit(org, "system")
    assert exc.value.code == "org_cannot_apply"


def test_reapplying_waits_for_the_cooling_off_period(operator, settings):
    settings.REAPPLY_COOLING_OFF_DAYS = 30
    org, owner = applicant_org()
    first = submit(org, owner)
    application_decide(application=first, decision="reject", reason="no", actor=operator)
    with pytest.raises(Conflict) as exc:
        submit(org, owner)
    assert exc.value.code == "cooling_off"
    assert "available_at" in exc.value.details
    Application.objects.filter(pk=first.pk).update(
        decided_at=timezone.now() - timedelta(days=31))
    second = submit(org, owner, use_case="agents")
    org.refresh_from_db()
    assert (org.status, second.state) == (OrgStatus.APPLIED, ApplicationState.SUBMITTED)
    assert AuditEvent.objects.filter(org=org, action="org.reapply").count() == 1


def test_approval_needs_the_required_checks_and_a_pool(operator):
    org, owner = applicant_org()
    app = submit(org, owner)  # no pool in its region
    with pytest.raises(Unprocessable) as exc:
        application_decide(application=app, decision="approve", reason="ok", actor=operator)
    assert exc.value.code == "checklist_incomplete"
    assert exc.value.details["missing"] == ["contact_reachable", "identity_verified",
                                            "use_case_acceptable"]
    tick_required(app, operator)
    with pytest.raises(Unprocessable) as exc:
        application_decide(application=app, decision="approve", reason="ok", actor=operator)
    assert exc.value.code == "pool_required"
    org.refresh_from_db()
    assert org.status == OrgStatus.APPLIED  # the failed attempts left nothing behind
    application_decide(application=app, decision="approve", reason="ok", actor=operator,
                       pool_id=PoolFactory().pk)
    org.refresh_from_db()
    assert org.status == OrgStatus.APPROVED


def test_payment_method_can_be_ticked_by_the_system_after_approval(operator):
    PoolFactory(region="us-east")
    org, owner = applicant_org()
    app = submit(org, owner)
    tick_required(app, operator)
    application_decide(application=app, decision="approve", reason="ok", actor=operator)
    check = application_check_set(application=app, item="payment_method_on_file", done=True,
                                  actor="stripe")
    assert (check.done, check.done_by_label) == (True, "stripe")
    with pytest.raises(DomainError) as exc:
        application_check_set(application=app, item="vibes", done=True, actor=operator)
    assert exc.value.code == "invalid_check_item"


def test_reviewer_must_be_an_operator_and_assignment_starts_review(operator):
    org, owner = applicant_org()
    app = submit(org, owner)
    with pytest.raises(Unprocessable):
        application_reviewer_assign(application=app, reviewer=UserFactory(), actor=operator)
    app = application_reviewer_assign(application=app, reviewer=operator, actor=operator)
    org.refresh_from_db()
    assert (app.state, org.status) == (ApplicationState.IN_REVIEW, OrgStatus.IN_REVIEW)


def test_a_decided_application_cannot_be_decided_again(operator):
    org, owner = applicant_org()
    app = submit(org, owner)
    application_decide(application=app, decision="reject", reason="no", actor=operator)
    with pytest.raises(IllegalTransition):
        application_decide(application=app, decision="approve", reason="yes", actor=operator)


def test_bulk_decision_is_all_or_nothing_and_names_every_failure(operator):
    PoolFactory(region="us-east")  # so the vetted ones could be approved
    ready = []
    for name in ("One", "Two"):
        org, owner = applicant_org(name)
        ready.append(submit(org, owner))
        tick_required(ready[-1], operator)
    org, owner = applicant_org("Unvetted")
    unvetted = submit(org, owner)
    ids = [a.pk for a in ready] + [unvetted.pk]
    with pytest.raises(Conflict) as exc:
        applications_decide_bulk(application_ids=ids, decision="approve", reason="wave 1",
                                 actor=operator)
    assert exc.value.code == "bulk_decision_failed"
    assert list(exc.value.details["failures"]) == [str(unvetted.pk)]
    assert not Application.objects.filter(state=ApplicationState.APPROVED).exists()
    decided = applications_decide_bulk(application_ids=ids, decision="reject",
                                       reason="not now", actor=operator,
                                       shared_reason="Capacity is full this quarter.")
    assert {a.state for a in decided} == {ApplicationState.REJECTED}


def test_request_info_needs_a_message_for_the_org(operator):
    org, owner = applicant_org()
    app = submit(org, owner)
    with pytest.raises(DomainError) as exc:
        application_decide(application=app, decision="request_info", reason="vague",
                           actor=operator)
    assert exc.value.code == "reason_required"



def test_an_org_rejected_through_the_lifecycle_can_still_reapply_later(operator, settings):
    settings.REAPPLY_COOLING_OFF_DAYS = 0
    org, owner = applicant_org()
    first = submit(org, owner)
    org_reject(org=org, actor=operator, reason="rejected from the org page")
    second = submit(org, owner)
    first.refresh_from_db()
    assert (first.state, second.state) == (ApplicationState.REJECTED, ApplicationState.SUBMITTED)
