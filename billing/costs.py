"""Daily costs for the Costs API (OpenAI's GET /v1/organization/costs), to the cent of the
invoice.

An invoice rounds once per line (billing/rating.py): a day has no rounding of its own, so a day's
amount of a line is defined as the change in that line's ROUNDED running total:

    day_cents(line, d) = round(exact total of the line through day d)
                       - round(exact total of the line through day d - 1)

Per line, the days telescope to round(the month's exact total), which is the invoice line; the
days of a month therefore add up to the invoice total exactly, whatever the prices, the speed
credit or the discount. Each day is within a cent of its exact share, and a day's figure never
changes once the day is over (a largest-remainder split of the month would move past days as
usage accrues). The discount line is the same rule applied to the discount of the running
subtotal. Days are UTC days; a month-to-date page rates the current month up to now.

Booking charges and refunds are lines of their own (one per booking), on the UTC day they
happened, like on the invoice.

Everything comes from the same inputs as the invoice (hourly rollups, price versions, booking
charges, the org's discount): six queries for a page, whatever the months it spans.
"""

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, date, datetime

from billing.periods import month_bounds, month_of
from billing.rating import (
    BookingLine,
    Price,
    RatedLine,
    UsageRow,
    discount_pico,
    rate_usage,
    round_pico_to_cents,
)
from billing.selectors import (
    billing_discount_bps,
    booking_lines_by_org,
    price_list_for,
    usage_rows_for,
)
from orgs.models import Organization
from quotas.models import CapacityPool

# Rating's line kinds as the Costs API names its line items (premium input and output are one).
LINE_ITEMS = {"input": "input", "output": "output", "premium_input": "premium",
              "premium_output": "premium", "speed_credit": "speed credit",
              "booking": "booked capacity", "booking_refund": "booking refunds",
              "discount": "discounts"}
# kind, pool, price version, booking: one invoice line
LineKey = tuple[str, int | None, int | None, int | None]


@dataclass(frozen=True)
class DayCost:
    day: date
    line_item: str
    cents: int
    quantity_tokens: int | None


def _line_key(line: RatedLine) -> LineKey:
    return line.kind, line.pool_id, line.price_version_id, line.booking_id


def _month_days(rows: list[UsageRow], prices: list[Price], discount_bps: int,
                bookings: list[BookingLine]) -> dict[date, dict[LineKey, tuple[int, int]]]:
    """Day -> line -> (cents, tokens) for one month's rows, by the running-total rule."""
    by_day: dict[date, list[UsageRow]] = defaultdict(list)
    for row in rows:
        by_day[row.hour.astimezone(UTC).date()].append(row)
    booked: dict[date, list[BookingLine]] = defaultdict(list)
    for line in bookings:
        booked[line.at.astimezone(UTC).date()].append(line)
        by_day.setdefault(line.at.astimezone(UTC).date(), [])
    running: dict[LineKey, int] = defaultdict(int)
    subtotal, days = 0, {}
    for day in sorted(by_day):
        before = {key: round_pico_to_cents(pico) for key, pico in running.items()}
        discount_before = round_pico_to_cents(discount_pico(subtotal_pico=subtotal,
                                                            discount_bps=discount_bps))
        tokens = {}
        for line in rate_usage(usage=by_day[day], prices=prices, bookings=booked[day]):
            running[_line_key(line)] += line.amount_pico
            subtotal += line.amount_pico
            tokens[_line_key(line)] = line.quantity_tokens
        cents = {key: (round_pico_to_cents(pico) - before.get(key, 0), tokens.get(key, 0))
                 for key, pico in running.items()}
        discount = round_pico_to_cents(discount_pico(subtotal_pico=subtotal,
                                                     discount_bps=discount_bps))
        cents[("discount", None, None, None)] = (discount - discount_before, 0)
        days[day] = {key: value for key, value in cents.items() if value[0] or value[1]}
    return days


def org_daily_costs(*, org: Organization, start: datetime, end: datetime) -> list[DayCost]:
    """The org's costs per UTC day and line item for the days in [start, end) (both UTC
    midnights). Each month is rated from its first day (running totals need it), however late
    in it `start` falls."""
    month_start, _ = month_bounds(month_of(start))
    rows = usage_rows_for(org=org, start=month_start, end=end)
    bookings = booking_lines_by_org(org_ids={org.pk}, start=month_start, end=end)[org.pk]
    prices = price_list_for(org_id=org.pk, pool_ids={row.pool_id for row in rows})
    discount_bps = billing_discount_bps(org=org)
    models = dict(CapacityPool.objects.filter(
        pk__in={row.pool_id for row in rows} | {b.pool_id for b in bookings})
        .values_list("pk", "model"))
    months: dict[date, list[UsageRow]] = defaultdict(list)
    booked: dict[date, list[BookingLine]] = defaultdict(list)
    for row in rows:
        months[month_of(row.hour)].append(row)
    for line in bookings:
        booked[month_of(line.at)].append(line)
    costs = []
    for month in sorted(set(months) | set(booked)):
        for day, lines in _month_days(months[month], prices, discount_bps,
                                      booked[month]).items():
            if not start.date() <= day < end.date():
                continue
            for (kind, pool_id, _, _), (cents, tokens) in lines.items():
                item = LINE_ITEMS[kind]
                costs.append(DayCost(day=day, cents=cents,
                                     line_item=f"{models[pool_id]}, {item}" if pool_id else item,
                                     quantity_tokens=tokens if kind != "discount" else None))
    return costs
