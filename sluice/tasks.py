"""Thin Celery wrappers around sluice.mail."""

from celery import shared_task

from sluice import mail


@shared_task
def email_deliver(*, email_id: int) -> bool:
    return mail.email_deliver(email_id=email_id)


@shared_task
def emails_drain() -> int:
    return mail.emails_drain()
