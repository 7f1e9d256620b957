"""The pure rating function: units, the once-per-line rounding rule, price changes, speed credit."""

from datetime import UTC, datetime

import pytest

from billing.rating import (
    Price,
    UsageRow,
    price_for,
    rate_usage,
    round_pico_to_cents,
    total_cents,
    usage_cost_micros,
)

H9 = datetime(2026, 10, 5, 9, tzinfo=UTC)
H10 = datetime(2026, 10, 5, 10, tzinfo=UTC)
H11 = datetime(2026, 10, 5, 11, tzinfo=UTC)


def row(hour, i=0, o=0, pi=None, po=None, pool=1):
    return UsageRow(pool_id=pool, hour=hour, input_tokens=i, output_tokens=o,
                    premium_input_tokens=i if pi is None else pi,
                    premium_output_tokens=o if po is None else po)


def by_kind(lines):
    return {ln.kind: ln for ln in lines}


def test_list_price_without_versions_is_5_and_30_dollars_per_million():
    lines = rate_usage(usage=[row(H9, i=1_000_000, o=1_000_000)], prices=[])
    assert {k: ln.amount_cents for k, ln in by_kind(lines).items()} == {
        "input": 500, "output": 3000}
    assert total_cents(lines) == 3500


@pytest.mark.parametrize(("pico", "cents"), [
    (0, 0), (4_999_999_999, 0), (5_000_000_000, 1), (15_000_000_000, 2),
    (14_999_999_999, 1), (-5_000_000_000, -1), (-4_999_999_999, 0),
])
def test_rounding_is_nearest_cent_halves_away_from_zero(pico, cents):
    assert round_pico_to_cents(pico) == cents


def test_rounding_happens_once_per_line_not_per_hour():
    # 1_001 input tokens per hour at $5/M = 0.5005 cents: rounded per hour that would be
    # 1 cent x 3 = 3 cents; summed exactly then rounded once it is 1.5015 -> 2 cents.
    usage = [row(h, i=1_001) for h in (H9, H10, H11)]
    lines = rate_usage(usage=usage, prices=[])
    assert by_kind(lines)["input"].quantity_tokens == 3_003
    assert by_kind(lines)["input"].amount_cents == 2


def test_a_price_change_on_the_hour_splits_lines_by_version():
    old = Price(pool_id=1, effective_from=datetime(2026, 1, 1, tzinfo=UTC), input=5_000_000,
                output=30_000_000, premium_input=1_000_000, premium_output=6_000_000,
                version_id=1)
    new = Price(pool_id=1, effective_from=H10, input=4_000_000, output=24_000_000,
                premium_input=2_000_000, premium_output=10_000_000, version_id=2)
    # 09:00 is the hour before the change; 10:00 is the hour the new version starts.
    usage = [row(H9, i=1_000_000, o=100_000), row(H10, i=1_000_000, o=100_000)]
    lines = rate_usage(usage=usage, prices=[new, old])
    got = [(ln.price_version_id, ln.kind, ln.amount_cents) for ln in lines]
    assert got == [
        (1, "input", 500), (1, "output", 300), (1, "premium_input", 100),
        (1, "premium_output", 60),
        (2, "input", 400), (2, "output", 240), (2, "premium_input", 200),
        (2, "premium_output", 100),
    ]
    assert price_for(pool_id=1, hour=H9, prices=[new, old]) is old
    assert price_for(pool_id=1, hour=H10, prices=[new, old]) is new


def test_negotiated_version_wins_over_public_one():
    public = Price(pool_id=1, effective_from=H9, input=5_000_000, output=30_000_000)
    negotiated = Price(pool_id=1, effective_from=datetime(2026, 1, 1, tzinfo=UTC),
                       input=1_000_000, output=2_000_000, org_specific=True)
    assert price_for(pool_id=1, hour=H10, prices=[public, negotiated]) is negotiated


def test_speed_credit_returns_the_premium_on_slow_tokens():
    price = Price(pool_id=1, effective_from=H9, input=5_000_000, output=30_000_000,
                  premium_input=2_000_000, premium_output=10_000_000)
    # 300k of 1M input and 400k of 2M output tokens were delivered too slowly.
    usage = [row(H9, i=1_000_000, o=2_000_000, pi=700_000, po=1_600_000)]
    lines = by_kind(rate_usage(usage=usage, prices=[price]))
    assert lines["premium_input"].amount_cents == 200
    assert lines["premium_output"].amount_cents == 2000
    credit = lines["speed_credit"]
    assert credit.quantity_tokens == 700_000
    assert credit.amount_cents == -(60 + 400)
    assert total_cents(lines.values()) == 500 + 6000 + 200 + 2000 - 460


def test_no_speed_credit_line_when_everything_was_fast_or_no_premium():
    fast = rate_usage(usage=[row(H9, i=10, o=10)], prices=[
        Price(pool_id=1, effective_from=H9, input=1, output=1, premium_input=5,
              premium_output=5)])
    slow_without_premium = rate_usage(usage=[row(H9, i=10, o=10, pi=0, po=0)], prices=[])
    assert "speed_credit" not in by_kind(fast)
    assert "speed_credit" not in by_kind(slow_without_premium)


def test_discount_is_one_line_over_the_exact_subtotal():
    lines = rate_usage(usage=[row(H9, i=1_000_000, o=1_000_000)], prices=[],
                       discount_bps=1_000)
    assert by_kind(lines)["discount"].amount_cents == -350
    assert total_cents(lines) == 3150


def test_usage_cost_micros_matches_rating_and_never_runs_behind():
    price = Price(pool_id=1, effective_from=H9, input=5_000_000, output=30_000_000,
                  premium_input=500_000, premium_output=0)
    usage = [row(H9, i=3, o=7, pi=1, po=7)]
    exact_pico = sum(ln.amount_pico for ln in rate_usage(usage=usage, prices=[price]))
    assert exact_pico == 3 * 5_000_000 + 7 * 30_000_000 + 1 * 500_000
    assert usage_cost_micros(usage=usage, prices=[price]) == 226  # 225.5 rounded up
    # List prices are whole micros per token: exact.
    assert usage_cost_micros(usage=[row(H9, i=3, o=7)], prices=[]) == 15 + 210
