from django.apps import AppConfig


class QuotasConfig(AppConfig):
    name = "quotas"
    verbose_name = "Capacity and quotas"

    def ready(self) -> None:
        # Registers the gateway-token admin (kept apart from quotas/admin.py).
        from quotas import admin_gateway  # noqa: F401
