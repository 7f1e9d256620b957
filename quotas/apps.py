from django.apps import AppConfig


class QuotasConfig(AppConfig):
    name = "quotas"
    verbose_name = "Capacity and quotas"

    def ready(self) -> None:
        from orgs import events as orgs_events

        # Registers the gateway-token admin (kept apart from quotas/admin.py).
        from quotas import (
            admin_gateway,  # noqa: F401
            receivers,
        )

        orgs_events.org_transitioned.subscribe(receivers.org_transitioned_received)
        orgs_events.api_keys_changed.subscribe(receivers.api_keys_changed_received)
        orgs_events.application_submitted.subscribe(receivers.application_submitted_received)
        orgs_events.application_approving.subscribe(receivers.application_approving_received)
