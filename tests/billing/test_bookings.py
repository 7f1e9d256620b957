"""Bookings' money: the quote from the price book (effective-dated), the spend cap, the charge
and its refund by the rule, invoice lines of their own and the Costs API."""

from datetime import UTC, date, datetime, timedelta

import pytest

from billing.bookings import booking_quote
from billing.costs import org_daily_costs
from billing.models import BillingAccount, BookingCharge, PriceVersion
from billing.selectors import month_rated_lines, month_to_date_micros_by_org
from billing.services import booking_confirm, invoice_close_month, price_version_create
from orgs.models import AuditEvent
from quotas.bookings import BookingAsk, booking_cancel
from quotas.limiter.schema import KEY, pool_key
from quotas.models import Booking, BookingState
from sluice.errors import DomainError
from sluice.models import OutboundEmail
from tests.billing.conftest import usage_add
from tests.factories import (
    AllocationFactory,
    MembershipFactory,
    OrganizationFactory,
    PoolFactory,
)

pytestmark = pytest.mark.django_db

# Confirmed on 5 October 2026 for a window on the 20th.
NOW = datetime(2026, 10, 5, 12, tzinfo=UTC)
START = datetime(2026, 10, 20, 14, tzinfo=UTC)


def ask(start=START, hours=4, tps=3_000, **more) -> BookingAsk:
    return BookingAsk(starts_at=start, ends_at=start + timedelta(hours=hours), output_tps=tps,
                      **more)


@pytest.fixture
def org(pool):
    org = OrganizationFactory()
    AllocationFactory(org=org, pool=pool, guaranteed_tps=1_000, burst_tps=2_000)
    MembershipFactory(org=org)
    return org


def confirm(org, pool, a=None, now=NOW, **kwargs) -> Booking:
    return booking_confirm(org=org, pool=pool, ask=a or ask(), actor="test", now=now, **kwargs)


def test_the_list_price_without_a_version(org, pool):
    # 3,000 tokens/s x 4 h x $0.02 = $240.
    quote = booking_quote(org=org, pool=pool, ask=ask(), now=NOW)
    assert (quote.amount_micros, quote.price_version_id) == (240_000_000, None)
    assert quote.fits and quote.free.output_tps == 9_000 - 1_000


def test_each_quarter_hour_is_priced_by_the_version_in_force_then(org, pool, premium_price):
    # From 16:00 (half way through the window) a version at $0.05 per tokens/s and hour; the
    # org's negotiated version from 17:00 wins over it.
    PriceVersion.objects.create(pool=pool, effective_from=START + timedelta(hours=2),
                                input_micros_per_mtok=1, output_micros_per_mtok=1,
                                booking_output_micros_per_tps_hour=50_000)
    PriceVersion.objects.create(pool=pool, org=org, effective_from=START + timedelta(hours=3),
                                input_micros_per_mtok=1, output_micros_per_mtok=1,
                                booking_output_micros_per_tps_hour=10_000)
    quote = booking_quote(org=org, pool=pool, ask=ask(tps=1_000, hours=4), now=NOW)
    # 2 h x $0.02 + 1 h x $0.05 + 1 h x $0.01, per token/s, x 1,000 tokens/s.
    assert quote.amount_micros == 1_000 * (2 * 20_000 + 50_000 + 10_000)
    assert quote.price_version_id == premium_price.pk


def test_input_is_priced_apart_and_fractions_round_up_once(org):
    pool = PoolFactory(capacity_tps=10_000, prefill_capacity_tps=10_000)
    AllocationFactory(org=org, pool=pool, guaranteed_tps=100, burst_tps=100,
                      guaranteed_input_tps=100, burst_input_tps=100)
    PriceVersion.objects.create(pool=pool, effective_from=datetime(2026, 1, 1, tzinfo=UTC),
                                input_micros_per_mtok=1, output_micros_per_mtok=1,
                                booking_output_micros_per_tps_hour=3,
                                booking_input_micros_per_tps_hour=1)
    # (1 x 3 + 1 x 1) micro-dollars per hour x 1.25 h = 5 exactly; x 1.25 h of 1 tok/s at 3: 3.75.
    assert booking_quote(org=org, pool=pool, ask=ask(hours=1.25, tps=1, input_tps=1),
                         now=NOW).amount_micros == 5
    assert booking_quote(org=org, pool=pool, ask=ask(hours=1.25, tps=1),
                         now=NOW).amount_micros == 4


def test_confirming_charges_once_and_audits(org, pool):
    booking = confirm(org, pool)
    charge = BookingCharge.objects.get(booking=booking)
    assert (charge.amount_micros, charge.charged_at, charge.refund_micros) == (
        240_000_000, NOW, 0)
    assert AuditEvent.objects.filter(action="booking.create", org=org).count() == 1
    assert AuditEvent.objects.filter(action="billing.booking_charge", org=org).count() == 1


def test_a_quote_that_moved_is_409_and_nothing_is_written(org, pool):
    with pytest.raises(DomainError) as refused:
        confirm(org, pool, quote_micros=239_999_999)
    assert (refused.value.status, refused.value.code) == (409, "quote_changed")
    assert refused.value.details["amount_micros"] == 240_000_000
    assert not Booking.objects.exists() and not BookingCharge.objects.exists()


def test_the_spend_cap_counts_the_month_and_the_booking(org, pool, premium_price,
                                                        redis_client,
                                                        django_capture_on_commit_callbacks):
    # $100 of October usage: 2.5M output tokens at $30 + $10 premium per million.
    usage_add(org=org, pool=pool, hour=datetime(2026, 10, 2, 9, tzinfo=UTC), o=2_500_000,
              po=2_500_000)
    spent = month_to_date_micros_by_org(org_ids={org.pk}, now=NOW)[org.pk]
    assert spent == 100_000_000
    BillingAccount.objects.create(org=org, spend_cap_micros=spent + 240_000_000 - 1)
    with pytest.raises(DomainError) as refused:
        confirm(org, pool)
    assert (refused.value.status, refused.value.code) == (422, "spend_cap_exceeded")
    assert refused.value.details["quote_micros"] == 240_000_000
    assert not Booking.objects.exists()
    BillingAccount.objects.filter(org=org).update(spend_cap_micros=spent + 240_000_000)
    with django_capture_on_commit_callbacks(execute=True):
        booking = confirm(org, pool)
    # Counted at once: in the month's rated spend and in the limiter's month counter.
    assert month_to_date_micros_by_org(org_ids={org.pk}, now=NOW + timedelta(seconds=1))[
        org.pk] == spent + 240_000_000
    counter = redis_client.get(pool_key(pool.pk, KEY.spend, org.pk, "202610"))
    assert int(counter) == 240_000_000
    with pytest.raises(DomainError) as refused:
        confirm(org, pool, ask(start=START + timedelta(days=1), hours=1, tps=1))
    assert refused.value.code == "spend_cap_exceeded"
    # A refund gives the room back.
    with django_capture_on_commit_callbacks(execute=True):
        booking_cancel(booking=booking, actor="test", now=NOW + timedelta(hours=1))
    assert int(redis_client.get(pool_key(pool.pk, KEY.spend, org.pk, "202610"))) == 0


@pytest.mark.parametrize(("before_start", "by_operator", "refunded"), [
    (timedelta(hours=24), False, 240_000_000),
    (timedelta(hours=24) - timedelta(seconds=1), False, 120_000_000),
    (timedelta(minutes=1), False, 120_000_000),
    (timedelta(minutes=1), True, 240_000_000),
    (-timedelta(hours=1), True, 240_000_000),
])
def test_the_refund_rule(org, pool, before_start, by_operator, refunded):
    booking = confirm(org, pool)
    booking_cancel(booking=booking, actor="test", by_operator=by_operator,
                   now=START - before_start)
    charge = BookingCharge.objects.get(booking=booking)
    assert (charge.refund_micros, charge.refunded_at) == (refunded, START - before_start)
    notices = OutboundEmail.objects.filter(kind="billing.booking_cancelled").count()
    assert notices == (1 if by_operator else 0)


def test_the_org_cannot_cancel_once_started(org, pool):
    booking = confirm(org, pool)
    with pytest.raises(DomainError) as refused:
        booking_cancel(booking=booking, actor="test", now=START)
    assert refused.value.code == "booking_started"
    assert BookingCharge.objects.get(booking=booking).refunded_at is None


def test_invoices_show_each_booking_and_each_refund_on_its_own_line(org, pool, premium_price):
    usage_add(org=org, pool=pool, hour=datetime(2026, 10, 3, 9, tzinfo=UTC), o=1_000_000,
              po=1_000_000)
    kept = confirm(org, pool)
    dropped = confirm(org, pool, ask(start=datetime(2026, 11, 10, tzinfo=UTC), hours=2,
                                     tps=1_000))
    # Cancelled in November, two days ahead: refunded in full on November's invoice.
    booking_cancel(booking=dropped, actor="test", now=datetime(2026, 11, 3, tzinfo=UTC))
    october, _ = invoice_close_month(org=org, month=date(2026, 10, 1), actor="test",
                                     now=datetime(2026, 11, 2, tzinfo=UTC))
    lines = {(ln.kind, ln.booking_id): ln for ln in october.lines.all()}
    assert lines[("booking", kept.pk)].amount_cents == 24_000
    assert lines[("booking", dropped.pk)].amount_cents == 4_000
    assert "2026-10-20 14:00" in lines[("booking", kept.pk)].description
    assert "Booked capacity" in lines[("booking", kept.pk)].description
    assert october.total_cents == 4_000 + 24_000 + 4_000  # $40 of tokens, two bookings
    november = month_rated_lines(org=org, month=date(2026, 11, 1))
    assert [(ln.kind, ln.booking_id, ln.amount_cents) for ln in november] == [
        ("booking_refund", dropped.pk, -4_000)]
    assert Booking.objects.get(pk=kept.pk).state == BookingState.CONFIRMED


def test_tokens_used_in_a_booked_window_are_usage_with_the_speed_credit(org, pool,
                                                                          premium_price):
    """The booking buys guaranteed tokens/s, not a speed of its own: its tokens are measured
    and billed like any request's, and those delivered below the pool's promise get the
    speed credit."""
    booking = confirm(org, pool)
    # In the window: 1M output tokens, 250,000 of them delivered too slow for the premium.
    usage_add(org=org, pool=pool, hour=START + timedelta(hours=1), o=1_000_000, po=750_000)
    october, _ = invoice_close_month(org=org, month=date(2026, 10, 1), actor="test",
                                     now=datetime(2026, 11, 2, tzinfo=UTC))
    lines = {(ln.kind, ln.booking_id): ln.amount_cents for ln in october.lines.all()}
    assert lines == {("booking", booking.pk): 24_000, ("output", None): 3_000,
                     ("premium_output", None): 1_000, ("speed_credit", None): -250}


def test_the_costs_api_groups_bookings_and_its_days_add_up_to_the_invoice(org, pool,
                                                                            premium_price):
    usage_add(org=org, pool=pool, hour=datetime(2026, 10, 3, 9, tzinfo=UTC), o=1_000_000)
    confirm(org, pool)
    other = confirm(org, pool, ask(start=START + timedelta(days=3), hours=1, tps=10),
                    now=NOW + timedelta(days=1))
    booking_cancel(booking=other, actor="test", now=NOW + timedelta(days=2))
    costs = org_daily_costs(org=org, start=datetime(2026, 10, 1, tzinfo=UTC),
                            end=datetime(2026, 11, 1, tzinfo=UTC))
    by_item = {}
    for cost in costs:
        by_item[(cost.day, cost.line_item)] = by_item.get((cost.day, cost.line_item), 0) \
            + cost.cents
    assert by_item[(date(2026, 10, 5), f"{pool.model}, booked capacity")] == 24_000
    assert by_item[(date(2026, 10, 6), f"{pool.model}, booked capacity")] == 20
    assert by_item[(date(2026, 10, 7), f"{pool.model}, booking refunds")] == -20
    invoice, _ = invoice_close_month(org=org, month=date(2026, 10, 1), actor="test",
                                     now=datetime(2026, 11, 2, tzinfo=UTC))
    assert sum(c.cents for c in costs) == invoice.total_cents


def test_booking_prices_go_into_the_price_book(pool, operator):
    version = price_version_create(
        pool=pool, effective_from=datetime(2099, 1, 1, tzinfo=UTC), input_micros_per_mtok=1,
        output_micros_per_mtok=1, booking_output_micros_per_tps_hour=33_000,
        booking_input_micros_per_tps_hour=7_000, actor=operator)
    assert (version.booking_output_micros_per_tps_hour,
            version.booking_input_micros_per_tps_hour) == (33_000, 7_000)
