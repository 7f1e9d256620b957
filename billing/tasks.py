"""Celery tasks: thin, take ids, safe to run twice."""

from celery import shared_task

from billing import services


@shared_task
def outbox_deliver_task(message_id: int) -> str:
    return services.outbox_deliver(message_id=message_id)


@shared_task
def outbox_drain_task() -> dict:
    return services.outbox_drain()


@shared_task
def stripe_event_process_task(stored_id: int) -> str:
    return services.stripe_event_process(stored_id=stored_id)


@shared_task
def invoices_close_previous_month_task() -> int:
    return services.invoices_close_previous_month(actor="celery:invoices_close")


@shared_task
def invoices_bill_late_usage_task() -> int:
    return services.invoices_bill_late_usage(actor="celery:invoices_late_usage")


@shared_task
def dunning_enforce_task() -> int:
    return services.dunning_enforce()


@shared_task
def spend_alerts_task() -> int:
    return services.spend_alerts_evaluate_all()
