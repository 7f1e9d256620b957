"""Emails about an organization's status, rendered from orgs/templates/orgs/email/<kind>.txt and
.html. Queued through sluice.mail in the transaction that makes the change, built after it
commits (so they read committed state).

`org_email_build` is every org email's envelope: the org's contact (asked through
`org_contact_reading`: rollout answers with the latest application's) and its owners. The
emails about applications, the waitlist and admission are rollout's (rollout/notifications.py).
"""

from django.conf import settings

from orgs.events import org_contact_reading
from orgs.models import Invitation, Membership, Organization, Role
from sluice.mail import Email, email_kind, email_queue
from sluice.secrets import secret_derive, secret_matches

SUBJECTS = {
    "suspended": "{org}'s access is suspended",
    "restored": "{org}'s access is restored",
}
# Lifecycle actions that email the organization from here, and the kind each one sends.
ORG_ACTION_EMAILS = {"suspend": "suspended", "restore": "restored"}


def org_contact(*, org: Organization) -> dict:
    """{"name", "email"} of the person who speaks for the org ("" when nobody said)."""
    contact = {"name": "", "email": ""}
    org_contact_reading.emit(org=org, contact=contact)
    return contact


def org_email_build(*, org: Organization, subject: str, template: str,
                    contact: dict | None = None, **context) -> Email | None:
    """An email to the org's contact (`contact`, else `org_contact`) and owners (None when
    there is nobody to tell). Templates greet `contact_name`."""
    contact = contact or org_contact(org=org)
    emails = [contact["email"]] if contact["email"] else []
    emails += Membership.objects.filter(org=org, role=Role.OWNER).exclude(
        user__email="").order_by("pk").values_list("user__email", flat=True)
    recipients = list(dict.fromkeys(emails))  # unique, first seen first
    if not recipients:
        return None
    return Email(to=recipients, subject=subject.format(org=org.name), template=template,
                 html=True, context={"org": org, "contact_name": contact["name"], **context})


def _org_email_kind(kind: str):
    @email_kind(f"orgs.{kind}")
    def build(*, org_id: int) -> Email | None:
        org = Organization.objects.get(pk=org_id)
        return org_email_build(org=org, subject=SUBJECTS[kind], template=f"orgs/email/{kind}")
    return build


for _kind in SUBJECTS:
    _org_email_kind(_kind)


def org_email_queue(*, org: Organization, action: str) -> None:
    """The email a lifecycle transition calls for, if any; once per transition."""
    kind = ORG_ACTION_EMAILS.get(action)
    if kind:
        email_queue(kind=f"orgs.{kind}", params={"org_id": org.pk},
                    key=f"org:{org.pk}:{action}:{org.status_changed_at.isoformat()}")


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
