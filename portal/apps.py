from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = "Self-service portal"

    def ready(self) -> None:
        from portal import services  # noqa: F401  (registers the verification email's builder)
