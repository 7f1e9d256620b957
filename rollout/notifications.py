"""Emails about an org's place on the waitlist and its admission (quotas/templates/quotas/email/),
queued by quotas' receiver of `org_transitioned` and built after the commit."""

from orgs.models import Organization
from orgs.notifications import org_email_build
from quotas.models import AllocationStatus
from quotas.waitlist import org_waitlist_estimate
from sluice.mail import Email, email_kind, email_queue

ACTION_EMAILS = {"approve": "approved", "admit": "admitted"}


@email_kind("quotas.approved")
def _approved(*, org_id: int) -> Email | None:
    org = Organization.objects.get(pk=org_id)
    return org_email_build(org=org, template="quotas/email/approved",
                           subject="{org} is approved and on the waitlist",
                           estimate=org_waitlist_estimate(org=org))


@email_kind("quotas.admitted")
def _admitted(*, org_id: int) -> Email | None:
    org = Organization.objects.get(pk=org_id)
    allocations = list(org.allocations.filter(status=AllocationStatus.ACTIVE)
                       .select_related("pool"))
    return org_email_build(org=org, template="quotas/email/admitted",
                           subject="{org} is admitted: create an API key to start",
                           allocations=allocations)


def org_waitlist_email_queue(*, org: Organization, action: str) -> None:
    kind = ACTION_EMAILS.get(action)
    if kind:
        email_queue(kind=f"quotas.{kind}", params={"org_id": org.pk},
                    key=f"org:{org.pk}:{action}:{org.status_changed_at.isoformat()}")
