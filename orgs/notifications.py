"""Emails about an organization's application and status, rendered from
orgs/templates/orgs/email/<kind>.txt and .html. Queued through sluice.mail in the transaction
that makes the change, built after it commits (so they read committed state).

The approved and admitted emails are about the waitlist and allocations: quotas builds them
(quotas/notifications.py) from its receiver of `org_transitioned`.
"""

from django.conf import settings

from orgs.models import Application, Invitation, Membership, Organization, Role
from sluice.mail import Email, email_kind, email_queue
from sluice.secrets import secret_derive, secret_matches

SUBJECTS = {
    "received": "We received {org}'s application",
    "info_requested": "{org}'s application: we need more information",
    "rejected": "{org}'s application was not accepted",
    "suspended": "{org}'s access is suspended",
    "restored": "{org}'s access is restored",
}
# Lifecycle actions that email the organization from here, and the kind each one sends.
ORG_ACTION_EMAILS = {"reject": "rejected", "suspend": "suspended", "restore": "restored"}


def org_recipients(*, org: Organization, application: Application | None) -> list[str]:
    emails = [application.contact_email] if application else []
    emails += Membership.objects.filter(org=org, role=Role.OWNER).exclude(
        user__email="").order_by("pk").values_list("user__email", flat=True)
    return list(dict.fromkeys(emails))  # unique, first seen first


def org_latest_application(*, org: Organization) -> Application | None:
    return org.applications.order_by("-submitted_at", "-id").first()


def org_email_build(*, org: Organization, subject: str, template: str,
                    application: Application | None = None, **context) -> Email | None:
    """An email to the org's contact and owners (None when there is nobody to tell)."""
    application = application or org_latest_application(org=org)
    recipients = org_recipients(org=org, application=application)
    if not recipients:
        return None
    return Email(to=recipients, subject=subject.format(org=org.name), template=template,
                 html=True, context={"org": org, "application": application,
                                     "cooling_off_days": settings.REAPPLY_COOLING_OFF_DAYS,
                                     **context})


def _org_email_kind(kind: str):
    @email_kind(f"orgs.{kind}")
    def build(*, org_id: int, application_id: int | None = None) -> Email | None:
        org = Organization.objects.get(pk=org_id)
        application = (Application.objects.get(pk=application_id) if application_id
                       else None)
        return org_email_build(org=org, subject=SUBJECTS[kind],
                               template=f"orgs/email/{kind}", application=application)
    return build


for _kind in SUBJECTS:
    _org_email_kind(_kind)


def org_email_queue(*, org: Organization, action: str) -> None:
    """The email a lifecycle transition calls for, if any; once per transition."""
    kind = ORG_ACTION_EMAILS.get(action)
    if kind:
        email_queue(kind=f"orgs.{kind}", params={"org_id": org.pk},
                    key=f"org:{org.pk}:{action}:{org.status_changed_at.isoformat()}")


def application_email_queue(*, application: Application, kind: str) -> None:
    """Application emails that are not org transitions: received, info_requested."""
    email_queue(kind=f"orgs.{kind}", params={"org_id": application.org_id,
                                             "application_id": application.pk},
                key=f"application:{application.pk}:{kind}:{application.updated_at.isoformat()}")


INVITATION_KIND = "inv"


class InvitationTokenLost(Exception):
    """The invitation's token cannot be made again: SLUICE_SECRET_KEY changed and the key
    that made it is not among SLUICE_SECRET_KEY_FALLBACKS."""


def invitation_token(*, invitation: Invitation) -> str:
    """The invitation's token, made again from its lookup and the server's secret key (the
    current one, or a fallback during a rotation): the token is stored nowhere, neither in the
    invitation (only its digest) nor in the email outbox (only the invitation's id)."""
    for key in (settings.SECRET_KEY, *settings.SECRET_KEY_FALLBACKS):
        token = secret_derive(kind=INVITATION_KIND, lookup=invitation.lookup, key=key)
        if secret_matches(token, invitation.token_digest):
            return token
    raise InvitationTokenLost(f"invitation {invitation.pk}: its token was made under a secret "
                              "key that is no longer configured; send a new invitation")


@email_kind("orgs.invitation")
def _invitation_email(*, invitation_id: int, token: str | None = None) -> Email | None:
    # `token` is only in rows queued by releases that kept it in the outbox until sent.
    invitation = Invitation.objects.select_related("org").get(pk=invitation_id)
    if invitation.accepted_at or invitation.revoked_at:
        return None
    token = token or invitation_token(invitation=invitation)
    return Email(to=[invitation.email], template="orgs/email/invitation",
                 subject=f"You are invited to {invitation.org.name} on Sluice",
                 context={"invitation": invitation,
                          "link": f"{settings.PUBLIC_URL}/portal/invitations/{token}/"})


def invitation_email_queue(*, invitation: Invitation) -> None:
    email_queue(kind="orgs.invitation", key=f"invitation:{invitation.pk}",
                params={"invitation_id": invitation.pk})
