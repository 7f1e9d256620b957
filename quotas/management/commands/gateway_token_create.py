from django.core.management.base import BaseCommand

from quotas.hook.gateway_tokens import gateway_token_create


class Command(BaseCommand):
    help = "Create a gateway token and print it once (only its hash is stored)."

    def add_arguments(self, parser):
        parser.add_argument("name", help="Which gateway uses it, e.g. 'edge-us-east-1'.")

    def handle(self, *args, name: str, **options):
        token, plaintext = gateway_token_create(name=name, actor="manage.py")
        self.stderr.write(f"Gateway token {token.name!r} (id {token.pk}) created. "
                          "It is shown once:")
        self.stdout.write(plaintext)
