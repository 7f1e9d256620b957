from django.apps import AppConfig


class AdmissionConfig(AppConfig):
    """The admission queue (issue #32): requests that may wait for capacity instead of being
    refused. Its engine (admission/engine) is Django-free and built on quotas/limiter; this
    app feeds it what lives in PostgreSQL (the default budgets) and counts what it does."""
    name = "admission"
    verbose_name = "Admission queue"

    def ready(self) -> None:
        from django.conf import settings

        from admission import receivers  # noqa: F401 - subscribes to the publishes
        from admission.engine.waiting import QueueConfig, queue_configure

        queue_configure(QueueConfig(pool_cap=settings.SLUICE_QUEUE_POOL_CAP,
                                    org_cap=settings.SLUICE_QUEUE_ORG_CAP))
