from django.apps import AppConfig
from django.db.models.signals import post_migrate


def usage_partitions_after_migrate(**kwargs) -> None:
    """Every migrate makes this month's partition and the next ones (beat does it daily too),
    so a deployment whose beat was down still has somewhere to put this month's usage."""
    from django.utils import timezone

    from metering.partitions import usage_events_partitioned, usage_partitions_ensure

    if usage_events_partitioned():  # not when migrated back before partitioning
        usage_partitions_ensure(now=timezone.now())


class MeteringConfig(AppConfig):
    name = "metering"
    verbose_name = "Usage metering"

    def ready(self) -> None:
        from metering import receivers
        from quotas import events as quotas_events

        post_migrate.connect(usage_partitions_after_migrate, sender=self)
        quotas_events.day_usage_reading.subscribe(receivers.day_usage_reading_received)
