"""Thin Celery wrappers. Queued by sluice.events after commit; each takes ids and re-reads.

Emails retry with backoff when the mail server is unreachable (smtplib errors are OSErrors).
"""

from celery import shared_task

from orgs.models import Application, Organization
from orgs.notifications import org_email


@shared_task(autoretry_for=(OSError,), retry_backoff=True, max_retries=6)
def org_email_send(*, org_id: int, kind: str) -> int:
    return org_email(org=Organization.objects.get(pk=org_id), kind=kind)


@shared_task(autoretry_for=(OSError,), retry_backoff=True, max_retries=6)
def application_email_send(*, application_id: int, kind: str) -> int:
    application = Application.objects.select_related("org").get(pk=application_id)
    return org_email(org=application.org, kind=kind, application=application)
