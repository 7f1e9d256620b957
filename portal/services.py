"""Account-level state changes of the portal: sign-up, applying with a new organization, email
verification. Org-level changes (members, keys, lifecycle) are the orgs services."""

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.tokens import PasswordResetTokenGenerator, default_token_generator
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from orgs.models import Organization, Role
from orgs.services import audit_record, invitation_accept, membership_add, org_create
from portal.models import VerifiedEmail
from sluice.errors import Conflict
from sluice.mail import Email, email_kind, email_queue
from sluice.rate_limits import Rate
from sluice.transactions import nestable, nested_atomic

User = get_user_model()


class EmailVerificationTokenGenerator(PasswordResetTokenGenerator):
    """Signed, expiring (PASSWORD_RESET_TIMEOUT) tokens bound to the user's current address."""

    key_salt = "portal.EmailVerificationTokenGenerator"

    def _make_hash_value(self, user, timestamp):
        return f"{user.pk}|{user.email}|{timestamp}"


email_verification_tokens = EmailVerificationTokenGenerator()


@nestable
@transaction.atomic(durable=True)
def org_apply(*, name: str, user) -> Organization:
    """A new organization in `applied`, owned by the user who applied."""
    org = org_create.nested(name=name, actor=user)
    membership_add.nested(org=org, user=user, role=Role.OWNER, actor=user)
    return org


@nested_atomic
def account_create(*, email: str, password: str):
    """A user whose username is their email address, asked to confirm it."""
    email = User.objects.normalize_email(email).strip().lower()
    try:
        with transaction.atomic():
            user = User.objects.create_user(username=email, email=email, password=password)
    except IntegrityError:
        raise Conflict("An account with this email address exists already.",
                       code="email_taken") from None
    audit_record(actor=user, action="user.signup", target=user, after={"email": email})
    email_verification_send(user=user)
    return user


@transaction.atomic(durable=True)
def account_signup(*, email: str, password: str, org_name: str) -> tuple:
    """Sign-up from the front door: the account and its organization's application."""
    user = account_create(email=email, password=password)
    return user, org_apply.nested(name=org_name, user=user)


@transaction.atomic(durable=True)
def account_join(*, email: str, password: str, invitation_token: str):
    """Sign-up through an invitation link: the account and its membership, or neither (an
    invalid or expired link rolls the new account back)."""
    user = account_create(email=email, password=password)
    return invitation_accept.nested(token=invitation_token, user=user)


@email_kind("portal.verify_email")
def _verification_email(*, user_id: int) -> Email | None:
    user = User.objects.get(pk=user_id)
    uid = urlsafe_base64_encode(force_bytes(user.pk))
    token = email_verification_tokens.make_token(user)
    return Email(to=[user.email], subject="Confirm your email address for Sluice",
                 template="portal/email/verify_email",
                 context={"user": user, "link": settings.PUBLIC_URL + reverse(
                     "portal:email_verify", args=[uid, token])})


def email_verification_send(*, user) -> None:
    """Sends the link after the surrounding transaction commits (never for a rolled-back user).
    The token is made when the email is built, from the user's committed state."""
    email_queue(kind="portal.verify_email", params={"user_id": user.pk},
                key=f"user:{user.pk}:verify_email:{timezone.now().isoformat()}")


@transaction.atomic(durable=True)
def email_verify(*, user, token: str) -> bool:
    if not email_verification_tokens.check_token(user, token):
        return False
    email_mark_verified.nested(user=user, actor=user)
    return True


@nestable
@transaction.atomic(durable=True)
def email_mark_verified(*, user, actor) -> bool:
    """The user's current address counts as confirmed. Idempotent (clicking the link twice is
    not an error); returns whether it was new."""
    _, created = VerifiedEmail.objects.get_or_create(user=user, email=user.email)
    if created:
        audit_record(actor=actor, action="user.email_verify", target=user,
                     after={"email": user.email})
    return created


# Reset emails one address may receive, whoever asks (the form counts every address asked
# about, known or not).
PASSWORD_RESET_EMAILS_PER_ADDRESS = Rate(count=3, seconds=3600)


def password_reset_email_queue(*, user) -> None:
    """Queued, built and sent by a task after the response: the request does the same work for
    a known address as for an unknown one (no SMTP round trip to time), and the reset token is
    made when the email is built, so it is never stored on the way."""
    email_queue(kind="portal.password_reset", params={"user_id": user.pk},
                key=f"user:{user.pk}:password_reset:{timezone.now().isoformat()}")


@email_kind("portal.password_reset")
def _password_reset_email(*, user_id: int) -> Email | None:
    user = User.objects.filter(pk=user_id, is_active=True).first()
    if user is None or not user.has_usable_password():
        return None  # deactivated since it was asked for: no link
    uid = urlsafe_base64_encode(force_bytes(user.pk))
    token = default_token_generator.make_token(user)
    return Email(to=[user.email], subject="Reset your Sluice password",
                 template="portal/email/password_reset",
                 context={"email": user.email, "link": settings.PUBLIC_URL + reverse(
                     "portal:password_reset_confirm", args=[uid, token])})
