from django.core.management.base import BaseCommand, CommandError

from webhooks.services import webhook_endpoint_secrets_reseal


class Command(BaseCommand):
    help = ("Seal every sealed secret (webhook signing secrets) again under the current "
            "SLUICE_SECRET_KEY: run after a rotation, before removing the old key from "
            "SLUICE_SECRET_KEY_FALLBACKS. Exit 1 if any does not open with the keys configured.")

    def handle(self, *args, **options):
        resealed, broken = webhook_endpoint_secrets_reseal()
        self.stdout.write(f"{resealed} webhook signing secret(s) sealed under the current key.")
        if broken:
            raise CommandError(
                f"{len(broken)} webhook endpoint(s) whose secret opens with no configured key "
                f"(ids {', '.join(map(str, broken))}): put the key that sealed them in "
                "SLUICE_SECRET_KEY_FALLBACKS and run this again, or disable those endpoints "
                "and create new ones.")
