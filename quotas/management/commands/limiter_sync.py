from django.core.management.base import BaseCommand

from quotas.publish import limiter_sync_all, limiter_sync_pool


class Command(BaseCommand):
    help = ("Rebuild the admission engine's state in Redis (keys, org status, limits) from "
            "PostgreSQL. Safe at any time: counters and buckets are left alone.")

    def add_arguments(self, parser):
        parser.add_argument("--pool", type=int, action="append",
                            help="Only this pool id (repeatable).")

    def handle(self, *args, pool: list[int] | None, **options):
        written = ({p: limiter_sync_pool(pool_id=p) for p in pool} if pool
                   else limiter_sync_all())
        for pool_id, orgs in written.items():
            self.stdout.write(f"pool {pool_id}: {orgs} org(s) synced")
