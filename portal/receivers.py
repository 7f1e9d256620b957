"""What the portal does when a lower app announces something (subscribed in
PortalConfig.ready())."""

from django.contrib.auth.models import AbstractBaseUser

from orgs.models import Membership
from orgs.selectors import user_is_operator
from portal.selectors import user_email_verified
from sluice.errors import PermissionDenied

EMAIL_UNVERIFIED = "Confirm your email address before creating keys."


def key_creating_received(*, org, actor) -> None:
    """A member creates keys (API or admin keys, in the portal or over the API) only once they
    have confirmed their email address: a key outlives the session that made it, and the
    address is how the org reaches its owner. Operators and commands act without membership;
    an admin key acts for a creator who had to confirm theirs to create it."""
    if not isinstance(actor, AbstractBaseUser) or user_is_operator(actor):
        return
    if not Membership.objects.filter(org=org, user=actor).exists():
        return
    if not user_email_verified(user=actor):
        raise PermissionDenied(EMAIL_UNVERIFIED, code="email_unverified")
