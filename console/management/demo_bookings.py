"""The demo's bookings: a window Acme Voice booked last month (a line of last month's invoice,
which seed_usage closes after this runs), one of Acme Voice in force now (the limiter admits
its allocation plus the booking: the portal's Quotas page says so), and windows of the next
days booked by Acme Voice and by two other orgs, so the portal's and the console's charts show
capacity taken. Through the same service as the portal (billing.services.booking_confirm),
dated as if confirmed then. Idempotent: a window already booked by its org is kept, and a
booking of Acme Voice in force is enough."""

from datetime import timedelta

from django.utils import timezone

from billing.periods import month_before, month_of
from billing.services import booking_confirm
from orgs.models import Organization
from quotas.bookings import BookingAsk, bookings_advance
from quotas.models import BOOKING_LIVE_STATES, Booking, CapacityPool

# Acme Voice's window in force when the demo is seeded.
IN_FORCE_HOURS, IN_FORCE_TPS = 6, 4_000
# (org slug, days from today, start hour UTC, hours, output tokens/s)
UPCOMING = [
    ("parrot-labs", 1, 13, 4, 20_000),
    ("loopwise-agents", 3, 9, 12, 15_000),
    ("acme-voice", 5, 14, 4, 5_000),
]


def _book(*, org: Organization, pool: CapacityPool, start, hours: int, tps: int, now) -> None:
    if Booking.objects.filter(org=org, pool=pool, starts_at=start).exists():
        return
    booking_confirm(org=org, pool=pool, actor="seed_demo", now=now, ask=BookingAsk(
        starts_at=start, ends_at=start + timedelta(hours=hours), output_tps=tps))


def seed_bookings(*, pool: CapacityPool) -> None:
    now = timezone.now()
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    acme = Organization.objects.get(slug="acme-voice")
    last_month = month_before(month_of(now))
    confirmed = today.replace(year=last_month.year, month=last_month.month, day=5, hour=10)
    _book(org=acme, pool=pool, start=confirmed.replace(day=20, hour=14), hours=4, tps=3_000,
          now=confirmed)
    # In force now: began on the quarter hour an hour ago, booked an hour before that.
    if not Booking.objects.filter(org=acme, pool=pool, state__in=BOOKING_LIVE_STATES,
                                  starts_at__lte=now, ends_at__gt=now).exists():
        begun = (now - timedelta(hours=1)).replace(second=0, microsecond=0)
        begun = begun.replace(minute=begun.minute - begun.minute % 15)
        _book(org=acme, pool=pool, start=begun, hours=IN_FORCE_HOURS, tps=IN_FORCE_TPS,
              now=begun - timedelta(hours=1))
    for slug, days, hour, hours, tps in UPCOMING:
        _book(org=Organization.objects.get(slug=slug), pool=pool, hours=hours, tps=tps,
              start=today + timedelta(days=days, hours=hour), now=now)
    bookings_advance(now=now)  # the past window is recorded as ended
