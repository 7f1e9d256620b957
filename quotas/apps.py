from django.apps import AppConfig
from django.core.signals import setting_changed


def hosts_setting_changed(*, setting: str, **kwargs) -> None:
    """The hook remembers its Host checks (quotas/hook/asgi.py): forget them when ALLOWED_HOSTS
    changes (override_settings in tests)."""
    if setting == "ALLOWED_HOSTS":
        from quotas.hook.asgi import host_refusals_forget

        host_refusals_forget()


class QuotasConfig(AppConfig):
    name = "quotas"
    verbose_name = "Capacity and quotas"

    def ready(self) -> None:
        from orgs import events as orgs_events
        from quotas import (
            admin_gateway_tokens,  # noqa: F401 - registers the gateway-token admin
            receivers,
        )
        from quotas.publish import engine_configure_from_settings, engine_settings_changed

        engine_configure_from_settings()
        # Tests override REDIS_URL or the reservation TTL: the engine follows.
        setting_changed.connect(engine_settings_changed)
        setting_changed.connect(hosts_setting_changed)

        orgs_events.org_service_stopping.subscribe(receivers.org_service_stopping_received)
        orgs_events.org_transitioned.subscribe(receivers.org_transitioned_received)
        orgs_events.api_keys_changed.subscribe(receivers.api_keys_changed_received)
        orgs_events.api_key_slice_checking.subscribe(receivers.api_key_slice_checking_received)
