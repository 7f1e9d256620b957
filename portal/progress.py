"""Where an organization stands on its way to access, and what happens next: the status page
shows it in full, and the pages that only make sense once admitted (quotas, usage, asking for
more) show it instead of empty forms and zeroed charts."""

from orgs.models import OrgStatus
from portal.selectors import org_latest_application
from rollout.models import ApplicationState
from rollout.waitlist import org_waitlist_estimate

# The path an application normally takes, shown as steps.
LIFECYCLE_STEPS = [OrgStatus.APPLIED, OrgStatus.IN_REVIEW, OrgStatus.APPROVED, OrgStatus.ACTIVE]
# Orgs that have (or had) an allocation: their quota and usage pages have something to show.
ADMITTED = frozenset({OrgStatus.ACTIVE, OrgStatus.SUSPENDED, OrgStatus.OFFBOARDED})

NEXT_STEP = {
    OrgStatus.APPLIED: "Your application is queued for vetting. An operator will review it soon.",
    OrgStatus.IN_REVIEW: "An operator is reviewing your application.",
    OrgStatus.APPROVED: "You are approved and on the waitlist. Organizations are admitted in "
                        "rollout waves as capacity grows; we email you when you are admitted.",
    OrgStatus.ACTIVE: "You have access. Create an API key and send traffic.",
    OrgStatus.REJECTED: "Your application was not accepted this time. You may apply again "
                        "after the cooling-off period.",
    OrgStatus.SUSPENDED: "Traffic is stopped while your organization is suspended.",
    OrgStatus.OFFBOARDED: "This organization no longer has access.",
}


def org_admitted(*, org) -> bool:
    return org.status in ADMITTED


def org_progress(*, org) -> dict:
    """The steps done and to come, the next step in words, the latest application and the
    waitlist estimate (approved orgs queued in a pool)."""
    current = LIFECYCLE_STEPS.index(org.status) if org.status in LIFECYCLE_STEPS else None
    application = org_latest_application(org=org)
    return {
        "steps": [{"label": OrgStatus(s).label, "done": current is not None and i < current,
                   "current": i == current} for i, s in enumerate(LIFECYCLE_STEPS)],
        "next_step": _next_step(org, application), "application": application,
        "estimate": org_waitlist_estimate(org=org), "admitted": org_admitted(org=org),
    }


def _next_step(org, application) -> str:
    if org.status == OrgStatus.APPLIED and application is None:
        return "Fill in the application form so operators can vet your organization."
    if application is not None and application.state == ApplicationState.INFO_REQUESTED:
        return "A reviewer needs more information: update your application."
    return NEXT_STEP[org.status]
