from django.apps import AppConfig


class RolloutConfig(AppConfig):
    name = "rollout"
    verbose_name = "Waitlist and rollout"

    def ready(self) -> None:
        from orgs import events as orgs_events
        from quotas import events as quotas_events
        from rollout import (
            notifications,  # noqa: F401 - registers the rollout emails' builders
            receivers,
        )

        orgs_events.org_transitioned.subscribe(receivers.org_transitioned_received)
        orgs_events.org_transition_requested.subscribe(
            receivers.org_transition_requested_received)
        orgs_events.org_contact_reading.subscribe(receivers.org_contact_reading_received)
        quotas_events.capacity_freed.subscribe(receivers.capacity_freed_received)
