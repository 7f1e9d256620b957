"""Emails about an organization's application and status, rendered from
orgs/templates/orgs/email/<kind>.txt and .html. Called by the Celery tasks in orgs/tasks.py
after the change committed, so they read committed state."""

from django.conf import settings
from django.core.mail import EmailMultiAlternatives
from django.template.loader import render_to_string

from orgs.models import Application, Membership, Organization, Role

SUBJECTS = {
    "received": "We received {org}'s application",
    "info_requested": "{org}'s application: we need more information",
    "approved": "{org} is approved and on the waitlist",
    "admitted": "{org} is admitted: create an API key to start",
    "rejected": "{org}'s application was not accepted",
    "suspended": "{org}'s access is suspended",
    "restored": "{org}'s access is restored",
}


def _recipients(org: Organization, application: Application | None) -> list[str]:
    emails = [application.contact_email] if application else []
    emails += Membership.objects.filter(org=org, role=Role.OWNER).exclude(
        user__email="").order_by("pk").values_list("user__email", flat=True)
    return list(dict.fromkeys(emails))  # unique, first seen first


def _context(org: Organization, application: Application | None, kind: str) -> dict:
    context = {"org": org, "application": application, "public_url": settings.PUBLIC_URL,
               "cooling_off_days": settings.REAPPLY_COOLING_OFF_DAYS}
    if kind == "approved":
        from quotas.waitlist import org_waitlist_estimate

        context["estimate"] = org_waitlist_estimate(org=org)
    if kind == "admitted":
        context["allocations"] = list(org.allocations.filter(status="active")
                                      .select_related("pool"))
    return context


def org_email(*, org: Organization, kind: str, application: Application | None = None) -> int:
    """Send one email of `kind`; returns the number sent (0 when there is nobody to tell)."""
    application = application or org.applications.order_by("-submitted_at", "-id").first()
    recipients = _recipients(org, application)
    if not recipients:
        return 0
    context = _context(org, application, kind)
    message = EmailMultiAlternatives(
        subject=SUBJECTS[kind].format(org=org.name),
        body=render_to_string(f"orgs/email/{kind}.txt", context),
        from_email=settings.DEFAULT_FROM_EMAIL, to=recipients,
    )
    message.attach_alternative(render_to_string(f"orgs/email/{kind}.html", context), "text/html")
    return message.send()
