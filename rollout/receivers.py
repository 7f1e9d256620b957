"""What rollout does when a lower app announces something (subscribed in RolloutConfig.ready())."""

from functools import partial

from django.db import transaction

from orgs.services.audit import audit_record
from rollout.models import OPEN_APPLICATION_STATES, Application, ApplicationState
from rollout.notifications import (
    application_contact,
    org_latest_application,
    org_rollout_email_queue,
)
from rollout.tasks import pool_auto_admit
from sluice.errors import Conflict

# Lifecycle decisions that belong to an open application: taken through `application_decide`
# (which calls the lifecycle), so the application and the queue stay in step.
APPLICATION_ACTIONS = frozenset({"review_start", "approve", "reject"})


def org_transitioned_received(*, org, action: str, actor, reason: str) -> None:
    if action == "admit":
        _application_mark_admitted(org=org, actor=actor)
    org_rollout_email_queue(org=org, action=action)


def _application_mark_admitted(*, org, actor) -> None:
    """Admitted by a wave, by auto-admission or by an operator's button: the org's approved
    application says so too, whichever path admitted it."""
    app = (Application.objects.select_for_update()
           .filter(org=org, state=ApplicationState.APPROVED).first())
    if app is None:
        return  # an org approved directly through the lifecycle, without an application
    app.state = ApplicationState.ADMITTED
    app.save(update_fields=["state", "updated_at"])
    audit_record(actor=actor, action="application.admitted", target=app, org=org,
                 before={"state": ApplicationState.APPROVED},
                 after={"state": ApplicationState.ADMITTED})


def org_transition_requested_received(*, org, action: str) -> None:
    if action not in APPLICATION_ACTIONS:
        return
    open_application = Application.objects.filter(
        org=org, state__in=OPEN_APPLICATION_STATES).values_list("pk", flat=True).first()
    if open_application is not None:
        raise Conflict(
            f"{org.name} has an open application (#{open_application}): review, approve or "
            "reject it from the vetting queue, so the application and the waitlist stay in step.",
            code="application_open", details={"application": open_application})


def org_contact_reading_received(*, org, contact: dict) -> None:
    """The contact of the org's latest application speaks for the org."""
    found = application_contact(org_latest_application(org=org))
    if found is not None:
        contact.update(found)


def capacity_freed_received(*, pool_id: int) -> None:
    """A pool with auto-admission admits the next queued orgs. After the commit, so the
    admission's own transaction sees the freed capacity."""
    transaction.on_commit(partial(pool_auto_admit.delay, pool_id=pool_id))
