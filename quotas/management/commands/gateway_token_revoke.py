from django.core.management.base import BaseCommand, CommandError

from quotas.hook.gateway_tokens import gateway_token_revoke
from quotas.models import GatewayToken
from sluice.errors import DomainError


class Command(BaseCommand):
    help = "Revoke a gateway token, by id or by its gw_<lookup> prefix."

    def add_arguments(self, parser):
        parser.add_argument("token", help="The id, or gw_<lookup> (the start of the token).")
        parser.add_argument("--reason", default="")

    def handle(self, *args, token: str, reason: str, **options):
        if token.startswith("gw_"):
            row = GatewayToken.objects.filter(lookup=token.split("_")[1]).first()
        else:
            row = GatewayToken.objects.filter(pk=int(token)).first() if token.isdigit() else None
        if row is None:
            raise CommandError(f"No gateway token {token!r}.")
        try:
            gateway_token_revoke(token=row, actor="manage.py", reason=reason)
        except DomainError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(f"Revoked {row.name!r} (id {row.pk}).")
