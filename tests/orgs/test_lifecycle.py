import pytest
from django.db import connection
from django.db.utils import ProgrammingError

from orgs.models import AuditEvent, OrgStatus, SuspensionReason
from orgs.services import (
    org_admit,
    org_approve,
    org_offboard,
    org_reject,
    org_restore,
    org_review_start,
    org_suspend,
)
from quotas.models import AllocationStatus
from sluice.errors import IllegalTransition
from tests.factories import AllocationFactory, OrganizationFactory

pytestmark = pytest.mark.django_db


def test_happy_path_applied_to_active_is_audited(operator):
    org = OrganizationFactory(status=OrgStatus.APPLIED)
    org_review_start(org=org, actor=operator)
    org_approve(org=org, actor=operator, reason="good fit")
    org_admit(org=org, actor=operator)
    org.refresh_from_db()
    assert org.status == OrgStatus.ACTIVE
    actions = list(AuditEvent.objects.filter(org=org).order_by("id").values_list(
        "action", "before__status", "after__status"))
    assert actions == [
        ("org.review_start", "applied", "in_review"),
        ("org.approve", "in_review", "approved"),
        ("org.admit", "approved", "active"),
    ]


@pytest.mark.parametrize("status", [OrgStatus.APPLIED, OrgStatus.REJECTED, OrgStatus.OFFBOARDED,
                                    OrgStatus.ACTIVE, OrgStatus.SUSPENDED])
def test_approve_from_wrong_state_changes_nothing(operator, status):
    org = OrganizationFactory(status=status)
    with pytest.raises(IllegalTransition) as exc:
        org_approve(org=org, actor=operator)
    assert exc.value.code == "illegal_transition"
    assert exc.value.details["status"] == status
    org.refresh_from_db()
    assert org.status == status
    assert not AuditEvent.objects.filter(org=org).exists()


def test_suspend_records_cause_and_restore_clears_it(operator):
    org = OrganizationFactory(status=OrgStatus.ACTIVE)
    org_suspend(org=org, actor="stripe", cause=SuspensionReason.PAYMENT, reason="unpaid")
    org.refresh_from_db()
    assert (org.status, org.suspension_reason) == (OrgStatus.SUSPENDED, "payment")
    org_restore(org=org, actor="stripe")
    org.refresh_from_db()
    assert (org.status, org.suspension_reason) == (OrgStatus.ACTIVE, "")


def test_reject_only_before_approval(operator):
    org = OrganizationFactory(status=OrgStatus.IN_REVIEW)
    org_reject(org=org, actor=operator, reason="use case out of scope")
    assert org.status == OrgStatus.REJECTED


def test_offboarding_ends_allocations(operator):
    allocation = AllocationFactory()
    org_offboard(org=allocation.org, actor=operator)
    allocation.refresh_from_db()
    assert allocation.status == AllocationStatus.ENDED


def test_audit_log_is_append_only(operator):
    org = OrganizationFactory(status=OrgStatus.APPLIED)
    org_review_start(org=org, actor=operator)
    event = AuditEvent.objects.get(org=org)
    with pytest.raises(ProgrammingError, match="append-only"), connection.cursor() as cursor:
        cursor.execute("UPDATE orgs_auditevent SET action = 'x' WHERE id = %s", [event.pk])
