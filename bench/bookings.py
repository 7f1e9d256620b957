"""Confirming a booking against a busy pool: server time per confirmation.

    DATABASE_URL=... REDIS_URL=redis://127.0.0.1:6379/4 python bench/bookings.py

Seeds a fresh pool with --allocations orgs holding an allocation and --bookings confirmed
bookings spread over the next 14 days (windows of 1 to 8 hours), then confirms bookings one at
a time and cancels each right after (so the ledger always holds exactly --bookings live ones):

- `service`: billing.services.booking_confirm, in-process: validation, the price, the spend cap,
  the pool and org locks, the ledger read and check, the insert, the charge, and the limits
  publish to Redis after the commit;
- `REST`: the same through POST /api/v1/orgs/<id>/bookings/ with Django's test client (the
  view, the serializer and the answer too, no network);
- windows of 4 hours (they overlap ~30 bookings) and of 7 days (they overlap all of them), for
  an org without a spend cap and for one with a cap and a month of hourly usage to rate.

Server time is wall time in this process around the call (PostgreSQL and Redis on the same
machine); its CPU time in this process is printed beside it. The target: at most 50 ms. The
cases take turns, one confirmation each, so a shared machine's load falls on all alike.
"""

import argparse
import random
import statistics
import time
import uuid
from datetime import UTC, datetime, timedelta

from common import django_setup


def _seed(allocations: int, bookings: int, rng: random.Random):
    from billing.models import BillingAccount, BookingCharge
    from metering.models import UsageHourly
    from orgs.models import Membership, Organization, OrgStatus, Role
    from quotas.models import Allocation, Booking, CapacityPool

    tag = uuid.uuid4().hex[:8]
    # Enough capacity that every seeded booking fits wherever it lands.
    pool = CapacityPool.objects.create(model=f"bench-book-{tag}", region="local",
                                       capacity_tps=100_000_000)
    orgs = Organization.objects.bulk_create(
        Organization(name=f"Bench {tag} {i}", slug=f"bench-{tag}-{i}", status=OrgStatus.ACTIVE)
        for i in range(allocations))
    Allocation.objects.bulk_create(
        Allocation(org=org, pool=pool, guaranteed_tps=1_000, burst_tps=2_000,
                   daily_tokens=10**9, max_concurrency=100) for org in orgs)
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    rows = []
    for i in range(bookings):
        start = now + timedelta(hours=2 + rng.randrange(14 * 24), minutes=15 * rng.randrange(4))
        rows.append(Booking(org=orgs[i % allocations], pool=pool, starts_at=start,
                            ends_at=start + timedelta(hours=rng.randint(1, 8)),
                            output_tps=rng.choice([100, 500, 1_000, 5_000])))
    seeded = Booking.objects.bulk_create(rows)
    BookingCharge.objects.bulk_create(
        BookingCharge(booking=b, org_id=b.org_id, amount_micros=1_000_000, charged_at=now)
        for b in seeded)
    user_model = Membership._meta.get_field("user").related_model
    owner = user_model.objects.create(username=f"bench-{tag}@example.com",
                                      email=f"bench-{tag}@example.com")
    Membership.objects.create(org=orgs[0], user=owner, role=Role.OWNER)
    capped = orgs[1]
    BillingAccount.objects.create(org=capped, spend_cap_micros=10**15)
    month = now.replace(day=1, hour=0)
    UsageHourly.objects.bulk_create(
        UsageHourly(org=capped, pool=pool, hour=month + timedelta(hours=h), requests=10,
                    input_tokens=100_000, output_tokens=50_000, premium_input_tokens=100_000,
                    premium_output_tokens=50_000)
        for h in range(int((now - month).total_seconds() // 3600)))
    return pool, orgs[0], capped, owner, now


def _confirm_timed(confirm, start, end) -> tuple[float, float, int]:
    """(wall ms, this process's CPU ms, queries) of one confirmation; then it is cancelled."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from quotas.bookings import booking_cancel
    from quotas.models import Booking

    with CaptureQueriesContext(connection) as captured:
        cpu, began = time.process_time(), time.perf_counter()
        booking_id = confirm(start, end)
        wall, cpu = time.perf_counter() - began, time.process_time() - cpu
    booking_cancel(booking=Booking.objects.get(pk=booking_id), actor="bench")
    return wall * 1000, cpu * 1000, len(captured)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--allocations", type=int, default=500)
    parser.add_argument("--bookings", type=int, default=1_000)
    parser.add_argument("--runs", type=int, default=40, help="confirmations per case")
    args = parser.parse_args()
    django_setup()
    from django.conf import settings
    from django.test import Client

    from billing.services import booking_confirm
    from quotas.bookings import BookingAsk
    from quotas.ledger import bookings_live

    rng = random.Random(35)
    pool, org, capped, owner, now = _seed(args.allocations, args.bookings, rng)
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]  # the test client's host
    client = Client()
    client.force_login(owner)

    def by_service(who):
        def confirm(start, end):
            return booking_confirm(org=who, pool=pool, actor="bench", ask=BookingAsk(
                starts_at=start, ends_at=end, output_tps=100)).pk
        return confirm

    def by_rest(start, end):
        answer = client.post(f"/api/v1/orgs/{org.pk}/bookings/", {
            "pool": pool.pk, "starts_at": start.isoformat(), "ends_at": end.isoformat(),
            "output_tps": 100}, content_type="application/json")
        assert answer.status_code == 201, answer.content
        return answer.json()["id"]

    cases = [("service, 4 h, no cap", by_service(org), 4),
             ("service, 4 h, capped org (a month of usage rated)", by_service(capped), 4),
             ("service, 7 days, no cap", by_service(org), 7 * 24),
             ("REST, 4 h, no cap", by_rest, 4),
             ("REST, 7 days, no cap", by_rest, 7 * 24)]
    print(f"pool {pool.pk}: {args.allocations} allocations, "
          f"{bookings_live(pool_id=pool.pk, start=now, end=now + timedelta(days=60)).count()} "
          f"live bookings over the next 14 days; {args.runs} confirmations per case\n")
    print("| case | median ms | p95 ms | max ms | CPU ms (median) | queries | ≤ 50 ms |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    # The cases take turns, so that the load of a shared machine falls on all of them alike.
    results = {name: [] for name, _, _ in cases}
    for _, confirm, hours in cases:  # warm-up: first queries, the URL resolver, templates
        start = now + timedelta(hours=2)
        _confirm_timed(confirm, start, start + timedelta(hours=hours))
    for _ in range(args.runs):
        for name, confirm, hours in cases:
            start = now + timedelta(hours=2 + rng.randrange(7 * 24))
            results[name].append(_confirm_timed(confirm, start, start + timedelta(hours=hours)))
    for name, _, _ in cases:
        walls = sorted(r[0] for r in results[name])
        p95 = walls[max(0, int(len(walls) * 0.95) - 1)]
        print(f"| {name} | {statistics.median(walls):.1f} | {p95:.1f} | {walls[-1]:.1f} | "
              f"{statistics.median(r[1] for r in results[name]):.1f} | "
              f"{max(r[2] for r in results[name])} | "
              f"{'met' if statistics.median(walls) <= 50 else 'NOT met'} (median) |")


if __name__ == "__main__":
    main()
