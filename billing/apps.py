from django.apps import AppConfig


class BillingConfig(AppConfig):
    name = "billing"
    verbose_name = "Billing"

    def ready(self) -> None:
        from billing import (
            notify,  # noqa: F401  (registers the billing emails' builders)
            receivers,
        )
        from orgs.events import org_transitioned

        org_transitioned.subscribe(receivers.org_transitioned_received)
