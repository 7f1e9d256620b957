from django.core.management.base import BaseCommand, CommandError

from billing.periods import month_parse
from billing.reconcile import reconcile


class Command(BaseCommand):
    help = "Compare our invoices with Stripe's; print each difference. Exit 1 if any."

    def add_arguments(self, parser):
        parser.add_argument("--month", help="YYYY-MM (default: every month)")

    def handle(self, *args, month=None, **options):
        try:
            period = month_parse(month) if month else None
        except ValueError:
            raise CommandError("--month must be YYYY-MM") from None
        differences = reconcile(month=period)
        for d in differences:
            self.stdout.write(f"{d.invoice}\t{d.problem}\tours={d.ours}\tstripe={d.stripe}")
        self.stdout.write(f"{len(differences)} difference(s).")
        if differences:
            raise SystemExit(1)
