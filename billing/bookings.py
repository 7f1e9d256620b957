"""Bookings' money: the quote, the refund rule, who may book. Reads only; the confirmation and
the refund are billing/services/bookings.py.

- Price: each quarter hour of the window at the booking prices of the version in force at its
  start (the org's negotiated version wins, as for usage; without a version the list price),
  per token/s and hour: output, and input where the pool meters it apart. Rounded up to the
  micro-dollar once per booking. The tokens used in the window are billed as usage, as always.
- Charged when confirmed: a line of that month's invoice, counted against that month's spend
  cap at once.
- Refund: cancelled by the org at least 24 hours before the window starts, in full; later
  (the org can cancel until the start), half. Cancelled by an operator, or by a change that
  breaks it (capacity lowered, allocation ended or shortened, org suspended or offboarded): in
  full, whenever. A refund is a line of the
  invoice of the month it happens in.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

from billing.rating import Price, booking_price_pico, micros_rounded_up, price_for
from billing.selectors import price_list_for
from orgs.models import Organization, Role
from quotas.bookings import BookingAsk, booking_validate
from quotas.ledger import WindowFree, window_free
from quotas.models import Booking, CapacityPool

# Who sees an org's bookings, and who may book or cancel (bookings spend money).
BOOKING_READERS = frozenset({Role.OWNER, Role.ADMIN, Role.BILLING})
BOOKING_MANAGERS = frozenset({Role.OWNER, Role.ADMIN})

FULL_REFUND_NOTICE = timedelta(hours=24)
LATE_REFUND_PERCENT = 50
REFUND_RULE = ("Cancel at least 24 hours before the window starts for a full refund; later, "
               "until the start, half is refunded. A booking an operator cancels is refunded "
               "in full.")


@dataclass(frozen=True)
class BookingQuote:
    ask: BookingAsk
    amount_micros: int
    # The prices in force at the window's start (a version starting inside the window prices
    # the hours it covers).
    price_version_id: int | None
    output_micros_per_tps_hour: int
    input_micros_per_tps_hour: int
    free: WindowFree  # the window's free headroom as the ledger stands now

    @property
    def fits(self) -> bool:
        return self.free.fits(output_tps=self.ask.output_tps, input_tps=self.ask.input_tps)


def booking_price(*, org: Organization, pool: CapacityPool, ask: BookingAsk
                  ) -> tuple[int, Price]:
    """(micro-dollars, the price in force at the start) of `ask` for `org`."""
    prices = price_list_for(org_id=org.pk, pool_ids={pool.pk})
    pico = booking_price_pico(pool_id=pool.pk, starts_at=ask.starts_at, ends_at=ask.ends_at,
                              output_tps=ask.output_tps, input_tps=ask.input_tps,
                              prices=prices)
    return micros_rounded_up(pico), price_for(pool_id=pool.pk, hour=ask.starts_at,
                                              prices=prices)


def booking_quote(*, org: Organization, pool: CapacityPool, ask: BookingAsk,
                  now: datetime | None = None) -> BookingQuote:
    """What confirming `ask` would cost now, and whether the window has the room. Refuses a
    booking that can never be (quotas.bookings.booking_validate). Writes nothing."""
    booking_validate(org=org, pool=pool, ask=ask, now=now)
    amount, price = booking_price(org=org, pool=pool, ask=ask)
    return BookingQuote(ask=ask, amount_micros=amount, price_version_id=price.version_id,
                        output_micros_per_tps_hour=price.booking_output,
                        input_micros_per_tps_hour=price.booking_input,
                        free=window_free(pool=pool, start=ask.starts_at, end=ask.ends_at))


def booking_refund_percent(*, booking: Booking, at: datetime | None = None) -> int:
    """The share of its charge a booking cancelled at `at` gets back (the module's rule)."""
    if booking.cancelled_by_operator:
        return 100
    at = at or timezone.now()
    return 100 if booking.starts_at - at >= FULL_REFUND_NOTICE else LATE_REFUND_PERCENT
