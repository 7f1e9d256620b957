from django.apps import AppConfig
from django.test.signals import setting_changed


class QuotasConfig(AppConfig):
    name = "quotas"
    verbose_name = "Capacity and quotas"

    def ready(self) -> None:
        # Registers the gateway-token admin (kept apart from quotas/admin.py).
        from quotas import admin_gateway  # noqa: F401
        from quotas.publish import engine_configure_from_settings, engine_settings_changed

        engine_configure_from_settings()
        # Tests override REDIS_URL or the reservation TTL: the engine follows.
        setting_changed.connect(engine_settings_changed)
