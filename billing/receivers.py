"""What billing does when a lower app announces something (subscribed in BillingConfig.ready())."""

from billing.services import stripe_customer_enqueue


def org_transitioned_received(*, org, action: str, actor, reason: str) -> None:
    if action == "admit":
        # In the admitting transaction: the outbox row commits with the admission, and the
        # Stripe customer is created after the commit.
        stripe_customer_enqueue(org_id=org.pk)
