from django.apps import AppConfig


class BillingConfig(AppConfig):
    name = "billing"
    verbose_name = "Billing"

    def ready(self) -> None:
        from billing import (
            notify,  # noqa: F401  (registers the billing emails' builders)
            receivers,
        )
        from billing.services.bookings import booking_refund
        from metering.events import usage_days_compacting, usage_month_retiring, usage_recorded
        from orgs.events import org_transitioned
        from quotas.events import booking_cancelled, limits_publishing

        org_transitioned.subscribe(receivers.org_transitioned_received)
        limits_publishing.subscribe(receivers.limits_publishing_received)
        usage_recorded.subscribe(receivers.usage_recorded_received)
        usage_month_retiring.subscribe(receivers.usage_month_retiring_received)
        usage_days_compacting.subscribe(receivers.usage_days_compacting_received)
        booking_cancelled.subscribe(booking_refund)
