"""Emails about an org's application, its place on the waitlist and its admission
(rollout/templates/rollout/email/), in orgs' envelope (`org_email_build`: the contact and the
owners). Queued in the transaction that makes the change, built after the commit."""

from django.conf import settings

from orgs.models import Organization
from orgs.notifications import org_email_build
from quotas.models import AllocationStatus
from rollout.models import Application
from rollout.waitlist import org_waitlist_estimate
from sluice.mail import Email, email_kind, email_queue

APPLICATION_SUBJECTS = {
    "received": "We received {org}'s application",
    "info_requested": "{org}'s application: we need more information",
    "rejected": "{org}'s application was not accepted",
}
# Lifecycle actions that email the org from here, and the kind each one sends.
ACTION_EMAILS = {"approve": "approved", "reject": "rejected", "admit": "admitted"}


def org_latest_application(*, org: Organization) -> Application | None:
    return org.applications.order_by("-submitted_at", "-id").first()


def application_contact(application: Application | None) -> dict | None:
    """The envelope's contact for an email about `application` (None: orgs asks)."""
    if application is None:
        return None
    return {"name": application.contact_name, "email": application.contact_email}


def _application_email_kind(kind: str):
    @email_kind(f"rollout.{kind}")
    def build(*, org_id: int, application_id: int | None = None) -> Email | None:
        org = Organization.objects.get(pk=org_id)
        application = (Application.objects.get(pk=application_id) if application_id
                       else org_latest_application(org=org))
        return org_email_build(org=org, subject=APPLICATION_SUBJECTS[kind],
                               template=f"rollout/email/{kind}",
                               contact=application_contact(application),
                               application=application,
                               cooling_off_days=settings.REAPPLY_COOLING_OFF_DAYS)
    return build


for _kind in APPLICATION_SUBJECTS:
    _application_email_kind(_kind)


@email_kind("rollout.approved")
def _approved(*, org_id: int) -> Email | None:
    org = Organization.objects.get(pk=org_id)
    application = org_latest_application(org=org)
    return org_email_build(org=org, template="rollout/email/approved",
                           subject="{org} is approved and on the waitlist",
                           contact=application_contact(application), application=application,
                           estimate=org_waitlist_estimate(org=org))


@email_kind("rollout.admitted")
def _admitted(*, org_id: int) -> Email | None:
    org = Organization.objects.get(pk=org_id)
    application = org_latest_application(org=org)
    allocations = list(org.allocations.filter(status=AllocationStatus.ACTIVE)
                       .select_related("pool"))
    return org_email_build(org=org, template="rollout/email/admitted",
                           subject="{org} is admitted: create an API key to start",
                           contact=application_contact(application), application=application,
                           allocations=allocations)


def org_rollout_email_queue(*, org: Organization, action: str) -> None:
    """The email a lifecycle transition calls for, if any; once per transition."""
    kind = ACTION_EMAILS.get(action)
    if kind:
        email_queue(kind=f"rollout.{kind}", params={"org_id": org.pk},
                    key=f"org:{org.pk}:{action}:{org.status_changed_at.isoformat()}")


def application_email_queue(*, application: Application, kind: str) -> None:
    """Application emails that are not org transitions: received, info_requested."""
    email_queue(kind=f"rollout.{kind}", params={"org_id": application.org_id,
                                                "application_id": application.pk},
                key=f"application:{application.pk}:{kind}:{application.updated_at.isoformat()}")
