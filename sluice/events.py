"""What happens after a commit that changed an organization or its limits.

One explicit place instead of signals: the admission engine learns the new state (so a suspension
stops traffic within a second), and people get the emails the change calls for. Both run only
after the transaction commits, never inside it.
"""

from functools import partial

from django.db import transaction

# Lifecycle actions that email the organization, and the template each one uses
# (orgs/templates/orgs/email/<kind>.txt|.html).
ORG_ACTION_EMAILS = {
    "approve": "approved",
    "admit": "admitted",
    "reject": "rejected",
    "suspend": "suspended",
    "restore": "restored",
}


def org_changed_on_commit(*, org_id: int, action: str) -> None:
    from quotas.publish import limits_publish_org_later

    limits_publish_org_later(org_id=org_id)
    if action == "admit":
        # Called inside the admitting transaction: the outbox row commits with the admission,
        # and the Stripe customer is created after the commit.
        from billing.services import stripe_customer_enqueue

        stripe_customer_enqueue(org_id=org_id)
    kind = ORG_ACTION_EMAILS.get(action)
    if kind:
        from orgs.tasks import org_email_send

        # The task renders after the commit, so the approved email's waitlist position and the
        # rejected email's shared reason are the committed ones.
        transaction.on_commit(partial(org_email_send.delay, org_id=org_id, kind=kind))


def application_changed_on_commit(*, application_id: int, kind: str) -> None:
    """Application emails that are not org transitions: received, info_requested."""
    from orgs.tasks import application_email_send

    transaction.on_commit(partial(application_email_send.delay, application_id=application_id,
                                  kind=kind))


def capacity_freed_on_commit(*, pool_id: int) -> None:
    """An allocation ended or shrank: a pool with auto-admission admits the next queued orgs.
    After the commit, so the admission's own transaction sees the freed capacity."""
    from quotas.tasks import pool_auto_admit

    transaction.on_commit(partial(pool_auto_admit.delay, pool_id=pool_id))


def limits_changed_on_commit(*, org_id: int) -> None:
    from quotas.publish import limits_publish_org_later

    limits_publish_org_later(org_id=org_id)



def billing_email_on_commit(*, org_id: int, template: str, context: dict) -> None:
    """Billing emails (payment failed, suspended, spend alerts) go out only once the change
    that calls for them is committed."""
    from billing.notify import billing_email_send

    transaction.on_commit(
        lambda: billing_email_send(org_id=org_id, template=template, context=context))
