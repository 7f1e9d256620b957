from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from orgs.services import operator_token_create
from sluice.errors import DomainError


class Command(BaseCommand):
    help = "Create a bearer token for operator scripts. The token is printed once."

    def add_arguments(self, parser):
        parser.add_argument("email", help="the staff user the token acts as")
        parser.add_argument("--name", required=True, help="what the token is for")

    def handle(self, *args, email, name, **options):
        user = get_user_model().objects.filter(email__iexact=email).first()
        if user is None:
            raise CommandError(f"No user with email {email}.")
        try:
            token, plaintext = operator_token_create(user=user, name=name, actor="cli")
        except DomainError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(f"Token {token.name!r} for {email} (shown once):\n{plaintext}")
