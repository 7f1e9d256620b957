from django.apps import AppConfig


class OrgsConfig(AppConfig):
    name = "orgs"
    verbose_name = "Organizations"

    def ready(self) -> None:
        # Registers the builders of the orgs' emails with sluice.mail.
        from orgs import notifications  # noqa: F401
