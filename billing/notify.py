"""Emails to an org's billing members (owners and billing role). Sent after commit, through
sluice.events.billing_email_on_commit."""

from django.conf import settings
from django.core.mail import send_mass_mail
from django.template.loader import render_to_string

from orgs.models import BILLING_READERS, Membership, Organization

SUBJECTS = {
    "payment_failed": "Payment failed for {org}: action needed",
    "suspended_for_payment": "{org} is suspended for non-payment",
    "spend_alert": "{org} has used {threshold}% of its monthly spend cap",
}


def billing_recipients(*, org_id: int) -> list[str]:
    return sorted(set(
        Membership.objects.filter(org_id=org_id, role__in=BILLING_READERS)
        .exclude(user__email="").values_list("user__email", flat=True)))


def billing_email_send(*, org_id: int, template: str, context: dict) -> int:
    recipients = billing_recipients(org_id=org_id)
    if not recipients:
        return 0
    org = Organization.objects.get(pk=org_id)
    context = {**context, "org": org, "public_url": settings.PUBLIC_URL}
    subject = SUBJECTS[template].format(org=org.name, **{k: v for k, v in context.items()
                                                         if k == "threshold"})
    body = render_to_string(f"billing/email/{template}.txt", context)
    # One message per recipient: members do not see each other's addresses.
    return send_mass_mail([(subject, body, settings.DEFAULT_FROM_EMAIL, [to])
                           for to in recipients])
