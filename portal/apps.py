from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = "Self-service portal"

    def ready(self) -> None:
        from orgs.events import key_creating
        from portal import (
            receivers,
            services,  # noqa: F401  (registers the verification email's builder)
        )

        key_creating.subscribe(receivers.key_creating_received)
