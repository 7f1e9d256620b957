"""What happens after a commit that changed an organization or its limits.

One explicit place instead of signals: the admission engine learns the new state (so a suspension
stops traffic within a second), and people get the emails the change calls for. Both run only
after the transaction commits, never inside it.
"""

from django.db import transaction


def org_changed_on_commit(*, org_id: int, action: str) -> None:
    from quotas.limiter.sync import limits_publish_org_later

    limits_publish_org_later(org_id=org_id)
    if action == "admit":
        # Called inside the admitting transaction: the outbox row commits with the admission,
        # and the Stripe customer is created after the commit.
        from billing.services import stripe_customer_enqueue

        stripe_customer_enqueue(org_id=org_id)


def limits_changed_on_commit(*, org_id: int) -> None:
    from quotas.limiter.sync import limits_publish_org_later

    limits_publish_org_later(org_id=org_id)


def on_commit(func, /, **kwargs) -> None:
    transaction.on_commit(lambda: func(**kwargs))


def billing_email_on_commit(*, org_id: int, template: str, context: dict) -> None:
    """Billing emails (payment failed, suspended, spend alerts) go out only once the change
    that calls for them is committed."""
    from billing.notify import billing_email_send

    transaction.on_commit(
        lambda: billing_email_send(org_id=org_id, template=template, context=context))
