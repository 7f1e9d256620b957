"""Rating: hourly usage + price versions -> invoice lines. Pure: no database, no clock.

Units and the rounding rule
- Prices are integer micro-dollars per million tokens (list: $5 = 5_000_000 in, $30 out).
- tokens x price is an exact integer in "micro-micro-dollars" (1e-12 $). Lines add these
  exact amounts and are rounded ONCE, per line, to the cent: halves away from zero (so a credit
  rounds like the charge it cancels). Totals are sums of rounded lines.
- A price version applies to an hourly row if it started at or before the row's hour. Versions
  start on an hour boundary (enforced when they are created), so no hour is ever split: the
  row of 10:00 is rated entirely with the version in force at 10:00.
- An org's negotiated version (org set) wins over the pool's public one; with neither, the
  pool is rated at list price with no premium.

Speed-aware premium: the premium is shown on every token, and a "speed credit" line gives it
back on the tokens that were not delivered fast (total - premium_eligible), with those tokens
as its quantity. Standard-tier pools' tokens are never premium-eligible (metering.usage), so a
premium set on a standard pool is credited back in full.

Cached input tokens (served from the upstream's prompt cache) are rated on their own line at
the version's cached input price (the input price when the version sets none); the premium
applies to them like to every input token.

Bookings: a booking is priced per token/s and hour of its window, each quarter hour at the
version in force at its start (`booking_price_pico`), rounded up to the micro-dollar once per
booking. It is one line of the invoice of the month it was confirmed in, and its refund one
line of the month it was cancelled in; the discount covers them like usage.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

LIST_INPUT_MICROS_PER_MTOK = 5_000_000
LIST_OUTPUT_MICROS_PER_MTOK = 30_000_000
# Booked capacity without a price version, per token/s and hour (the tokens used in the window
# are billed as usage too).
LIST_BOOKING_OUTPUT_MICROS_PER_TPS_HOUR = 20_000
LIST_BOOKING_INPUT_MICROS_PER_TPS_HOUR = 4_000
BOOKING_QUARTER = timedelta(minutes=15)
PICO_PER_TPS_QUARTER = 250_000  # micro-dollars per TPS-hour x 1/4 hour, in pico-dollars
PICO_PER_CENT = 10**10  # 1 cent = 1e4 micro-dollars; amounts carry a further 1e6 (per Mtok)
PICO_PER_MICRO = 10**6


@dataclass(frozen=True)
class UsageRow:
    pool_id: int
    hour: datetime
    input_tokens: int
    output_tokens: int
    premium_input_tokens: int
    premium_output_tokens: int
    cached_input_tokens: int = 0  # of input_tokens: rated at the cached input price


@dataclass(frozen=True)
class Price:
    pool_id: int
    effective_from: datetime | None  # None: the built-in list price
    input: int
    output: int
    premium_input: int = 0
    premium_output: int = 0
    org_specific: bool = False
    version_id: int | None = None
    cached_input: int | None = None  # None: the input price
    booking_output: int = LIST_BOOKING_OUTPUT_MICROS_PER_TPS_HOUR  # per token/s and hour
    booking_input: int = LIST_BOOKING_INPUT_MICROS_PER_TPS_HOUR

    @property
    def cached_input_or_input(self) -> int:
        return self.input if self.cached_input is None else self.cached_input


@dataclass(frozen=True)
class RatedLine:
    kind: str
    pool_id: int | None
    price_version_id: int | None
    quantity_tokens: int
    unit_micros_per_mtok: int
    amount_pico: int  # exact, before rounding
    booking_id: int | None = None  # a booking's charge or refund: a line of its own
    description: str = ""  # what the invoice says, where the kind and pool do not say it all

    @property
    def amount_cents(self) -> int:
        return round_pico_to_cents(self.amount_pico)


def round_pico_to_cents(pico: int) -> int:
    """Nearest cent, halves away from zero; integer arithmetic only."""
    sign = -1 if pico < 0 else 1
    return sign * ((abs(pico) * 2 + PICO_PER_CENT) // (2 * PICO_PER_CENT))


def list_price(pool_id: int) -> Price:
    return Price(pool_id=pool_id, effective_from=None, input=LIST_INPUT_MICROS_PER_MTOK,
                 output=LIST_OUTPUT_MICROS_PER_MTOK)


def price_for(*, pool_id: int, hour: datetime, prices: Sequence[Price]) -> Price:
    """The version in force at `hour`: the org's negotiated one if any, else the public one."""
    best = None
    for price in prices:
        if price.pool_id != pool_id or price.effective_from is None:
            continue
        if price.effective_from > hour:
            continue
        key = (price.org_specific, price.effective_from)
        if best is None or key > (best.org_specific, best.effective_from):
            best = price
    return best or list_price(pool_id)


@dataclass(frozen=True)
class BookingLine:
    """A booking's charge (positive) or refund (negative), in micro-dollars, dated when it
    happened (the month of its invoice, the day of the Costs API)."""
    kind: str  # "booking" or "booking_refund"
    booking_id: int
    pool_id: int
    price_version_id: int | None
    amount_micros: int
    at: datetime
    description: str = ""


def booking_price_pico(*, pool_id: int, starts_at: datetime, ends_at: datetime,
                       output_tps: int, input_tps: int, prices: Sequence[Price]) -> int:
    """The exact price of booking `output_tps` and `input_tps` over [starts_at, ends_at), a
    window on the quarter-hour grid: each quarter hour at the version in force at its start."""
    total, at = 0, starts_at
    while at < ends_at:
        price = price_for(pool_id=pool_id, hour=at, prices=prices)
        total += (output_tps * price.booking_output + input_tps * price.booking_input) \
            * PICO_PER_TPS_QUARTER
        at += BOOKING_QUARTER
    return total


def micros_rounded_up(pico: int) -> int:
    return -(-pico // PICO_PER_MICRO)


def _booking_rated(line: BookingLine) -> RatedLine:
    return RatedLine(kind=line.kind, pool_id=line.pool_id,
                     price_version_id=line.price_version_id, quantity_tokens=0,
                     unit_micros_per_mtok=0, amount_pico=line.amount_micros * PICO_PER_MICRO,
                     booking_id=line.booking_id, description=line.description)


@dataclass
class _Bucket:
    input: int = 0
    cached_input: int = 0
    output: int = 0
    slow_input: int = 0
    slow_output: int = 0


def _bucket_usage(usage: Iterable[UsageRow], prices: Sequence[Price]) -> dict[Price, _Bucket]:
    buckets: dict[Price, _Bucket] = {}
    for row in usage:
        bucket = buckets.setdefault(price_for(pool_id=row.pool_id, hour=row.hour,
                                              prices=prices), _Bucket())
        bucket.input += row.input_tokens
        bucket.cached_input += row.cached_input_tokens
        bucket.output += row.output_tokens
        bucket.slow_input += row.input_tokens - row.premium_input_tokens
        bucket.slow_output += row.output_tokens - row.premium_output_tokens
    return buckets


def _lines_for(price: Price, b: _Bucket) -> list[RatedLine]:
    def line(kind, quantity, unit, amount):
        return RatedLine(kind=kind, pool_id=price.pool_id, price_version_id=price.version_id,
                         quantity_tokens=quantity, unit_micros_per_mtok=unit, amount_pico=amount)

    uncached = b.input - b.cached_input
    cached_price = price.cached_input_or_input
    lines = [
        line("input", uncached, price.input, uncached * price.input),
        line("cached_input", b.cached_input, cached_price, b.cached_input * cached_price),
        line("output", b.output, price.output, b.output * price.output),
        line("premium_input", b.input, price.premium_input, b.input * price.premium_input),
        line("premium_output", b.output, price.premium_output, b.output * price.premium_output),
    ]
    credit = b.slow_input * price.premium_input + b.slow_output * price.premium_output
    # The credit's unit is left 0: it mixes input and output premiums.
    lines.append(line("speed_credit", b.slow_input + b.slow_output, 0, -credit))
    return [ln for ln in lines if ln.amount_pico != 0]


def _sort_key(price: Price):
    return (price.pool_id, price.effective_from is not None, price.effective_from,
            price.org_specific)


def discount_pico(*, subtotal_pico: int, discount_bps: int) -> int:
    """The discount line's exact amount (negative) for a subtotal: floored toward the org, so
    the discount never exceeds its percentage."""
    return -(subtotal_pico * discount_bps // 10_000)


def rate_usage(*, usage: Iterable[UsageRow], prices: Sequence[Price],
               discount_bps: int = 0, bookings: Iterable[BookingLine] = ()) -> list[RatedLine]:
    """Invoice lines for `usage`: per pool and price version, input, output, the premium on
    all tokens and the speed credit; then one line per booking charge or refund; then one
    discount line over the exact subtotal."""
    buckets = _bucket_usage(usage, prices)
    lines: list[RatedLine] = []
    for price in sorted(buckets, key=_sort_key):
        lines.extend(_lines_for(price, buckets[price]))
    lines.extend(_booking_rated(b) for b in sorted(bookings, key=lambda b: (b.at, b.kind,
                                                                           b.booking_id)))
    return _discounted(lines, discount_bps)


def _discounted(lines: list[RatedLine], discount_bps: int) -> list[RatedLine]:
    """`lines` and, when the discount comes to anything, one discount line over their exact
    subtotal."""
    discount = discount_pico(subtotal_pico=sum(ln.amount_pico for ln in lines),
                             discount_bps=discount_bps)
    if discount:
        lines.append(RatedLine(kind="discount", pool_id=None, price_version_id=None,
                               quantity_tokens=0, unit_micros_per_mtok=0, amount_pico=discount))
    return lines


# Lines that are not usage nor bookings: a discount over the subtotal, credits between invoices.
NOT_RATED_KINDS = frozenset({"discount", "credit_carried", "credit_applied"})


def credit_lines(*, subtotal_cents: int, balance_cents: int) -> list[RatedLine]:
    """What keeps an invoice from totalling below zero. A negative subtotal (refunds of
    bookings past the month's charges) becomes a credit carried to the next invoices, the
    invoice totalling zero; a positive one uses the credit carried so far (`balance_cents`),
    up to the subtotal."""
    def line(kind: str, cents: int) -> RatedLine:
        return RatedLine(kind=kind, pool_id=None, price_version_id=None, quantity_tokens=0,
                         unit_micros_per_mtok=0, amount_pico=cents * PICO_PER_CENT)

    if subtotal_cents < 0:
        return [line("credit_carried", -subtotal_cents)]
    used = min(subtotal_cents, max(balance_cents, 0))
    return [line("credit_applied", -used)] if used else []


def usage_billed(lines: Iterable) -> dict[tuple, tuple[int, int]]:
    """(kind, pool, price version, booking) -> (tokens, cents) of invoice lines or rated lines,
    summed (a month's invoice and its supplements): what was used and billed for it, the
    discount aside (the invoice does not record its rate, which may have changed since)."""
    billed: dict[tuple, tuple[int, int]] = {}
    for ln in lines:
        if str(ln.kind) in NOT_RATED_KINDS:
            continue
        key = (str(ln.kind), ln.pool_id, ln.price_version_id, ln.booking_id)
        tokens, cents = billed.get(key, (0, 0))
        billed[key] = (tokens + ln.quantity_tokens, cents + ln.amount_cents)
    return billed


def lines_not_yet_billed(*, rated: Sequence[RatedLine], billed: Iterable,
                         discount_bps: int = 0) -> list[RatedLine]:
    """What a month's invoices do not bill yet of its usage rated now (`rated`, discount lines
    aside): per kind, pool and price version, the tokens and the cents rated now minus those
    billed, so that the invoices of a month add up, line by line, to the month rated as one.
    Then one discount line over their subtotal at today's rate (a discount changed since does
    not rewrite what was billed). Quantities may come out negative only if usage vanished:
    the caller refuses those."""
    done = usage_billed(billed)
    lines = []
    for ln in rated:  # one line per kind, pool and price version
        if ln.kind in NOT_RATED_KINDS:
            continue
        tokens, cents = done.pop((str(ln.kind), ln.pool_id, ln.price_version_id,
                                  ln.booking_id), (0, 0))
        if (ln.quantity_tokens, ln.amount_cents) != (tokens, cents):
            lines.append(replace(ln, quantity_tokens=ln.quantity_tokens - tokens,
                                 amount_pico=(ln.amount_cents - cents) * PICO_PER_CENT))
    for (kind, pool_id, version_id, booking_id), (tokens, cents) in done.items():  # now gone
        lines.append(RatedLine(kind=kind, pool_id=pool_id, price_version_id=version_id,
                               quantity_tokens=-tokens, unit_micros_per_mtok=0,
                               amount_pico=-cents * PICO_PER_CENT, booking_id=booking_id))
    return _discounted(lines, discount_bps)


def total_cents(lines: Iterable[RatedLine]) -> int:
    return sum(ln.amount_cents for ln in lines)


def usage_cost_micros(*, usage: Iterable[UsageRow], prices: Sequence[Price],
                      discount_bps: int = 0) -> int:
    """What one batch of newly ingested usage adds to the org's month counter, in micro-dollars.

    Same prices, premium, speed credit and discount as `rate_usage`; the exact amount is
    rounded UP to the micro-dollar once per batch, so the counter never runs behind the
    invoice. With whole-dollar prices per million tokens (list $5/$30) every token costs a
    whole number of micros and the counter is exact; otherwise it is ahead by < 1 micro-dollar
    per batch."""
    pico = sum(ln.amount_pico for ln in rate_usage(usage=usage, prices=prices,
                                                   discount_bps=discount_bps))
    return max(0, -(-pico // PICO_PER_MICRO))
