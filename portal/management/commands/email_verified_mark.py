"""manage.py email_verified_mark EMAIL: count a user's current address as confirmed, as the
link in the confirmation email would (for support, when the email cannot reach them, and for
the demo owner of seed_demo). Audited; running it twice changes nothing."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from portal.services import email_mark_verified


class Command(BaseCommand):
    help = "Count a user's email address as confirmed."

    def add_arguments(self, parser):
        parser.add_argument("email")

    def handle(self, *args, email: str, **options):
        user = get_user_model().objects.filter(email__iexact=email.strip()).first()
        if user is None:
            raise CommandError(f"No user has the address {email}.")
        newly = email_mark_verified(user=user, actor="manage.py email_verified_mark")
        self.stdout.write(f"{user.email} {'is now' if newly else 'was already'} confirmed.")
