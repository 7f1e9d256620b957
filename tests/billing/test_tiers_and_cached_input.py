"""Tiers and cached input in billing: cached input tokens have their own price; an invoice
shows the fast and the standard tier on lines of their own, the premium only on the fast one; a
new price version reaches the admission engine's money holds."""

from datetime import UTC, date, datetime

import pytest

from billing.models import BillingAccount, PriceVersion
from billing.rating import Price, UsageRow, rate_usage
from billing.services import invoice_close_month, price_version_create
from quotas.models import UsageHourly
from tests.factories import AllocationFactory, OrganizationFactory, PoolFactory

OCT = date(2026, 10, 1)
NOV_2 = datetime(2026, 11, 2, tzinfo=UTC)
HOUR = datetime(2026, 10, 3, 9, tzinfo=UTC)


def test_cached_input_is_rated_on_its_own_line_at_its_own_price():
    price = Price(pool_id=1, effective_from=HOUR, input=5_000_000, output=30_000_000,
                  cached_input=500_000, premium_input=1_000_000)
    lines = {ln.kind: (ln.quantity_tokens, ln.unit_micros_per_mtok, ln.amount_cents)
             for ln in rate_usage(usage=[UsageRow(1, HOUR, 3_000_000, 0, 3_000_000, 0,
                                                  cached_input_tokens=2_000_000)],
                                  prices=[price])}
    assert lines == {"input": (1_000_000, 5_000_000, 500),
                     "cached_input": (2_000_000, 500_000, 100),
                     # The premium is on every input token, cached ones too.
                     "premium_input": (3_000_000, 1_000_000, 300)}


def test_without_a_cached_price_cached_input_costs_the_input_price():
    price = Price(pool_id=1, effective_from=HOUR, input=5_000_000, output=30_000_000)
    total = sum(ln.amount_pico for ln in rate_usage(
        usage=[UsageRow(1, HOUR, 1_000_000, 0, 0, 0, cached_input_tokens=400_000)],
        prices=[price]))
    assert total == 1_000_000 * 5_000_000


@pytest.mark.django_db
def test_the_invoice_shows_both_tiers_and_the_premium_on_the_fast_one_only(operator):
    fast = PoolFactory(model="sol", region="us-east", tier="fast")
    standard = PoolFactory(model="sol", region="us-east", tier="standard")
    for pool, premium in ((fast, 2_000_000), (standard, 0)):
        PriceVersion.objects.create(pool=pool, effective_from=datetime(2026, 1, 1, tzinfo=UTC),
                                    input_micros_per_mtok=5_000_000,
                                    output_micros_per_mtok=30_000_000,
                                    premium_output_micros_per_mtok=premium)
    org = OrganizationFactory()
    for pool, premium_output in ((fast, 1_000_000), (standard, 0)):
        UsageHourly.objects.create(org=org, pool=pool, hour=HOUR, requests=1,
                                   input_tokens=0, output_tokens=1_000_000,
                                   premium_output_tokens=premium_output)
    invoice, _ = invoice_close_month(org=org, month=OCT, actor=operator, now=NOV_2)
    lines = [(ln.kind, ln.description, ln.amount_cents) for ln in invoice.lines.all()]
    assert lines == [
        ("output", "Output tokens · sol · us-east · fast", 3000),
        ("premium_output", "Fast-tier premium, output tokens · sol · us-east · fast", 200),
        ("output", "Output tokens · sol · us-east · standard", 3000),
    ]


@pytest.mark.django_db
def test_a_new_price_version_republishes_the_capped_orgs_of_its_pool(operator,
                                                                     published_limits,
                                                                     django_capture_on_commit_callbacks):
    pool = PoolFactory()
    capped, uncapped = OrganizationFactory(), OrganizationFactory()
    for org in (capped, uncapped):
        AllocationFactory(org=org, pool=pool)
    BillingAccount.objects.create(org=capped, spend_cap_micros=10**9)
    with django_capture_on_commit_callbacks(execute=True):
        price_version_create(pool=pool, effective_from=datetime(2030, 1, 1, tzinfo=UTC),
                             input_micros_per_mtok=1, output_micros_per_mtok=2,
                             cached_input_micros_per_mtok=0, actor=operator)
    assert published_limits == [capped.pk]
    assert PriceVersion.objects.get(pool=pool).cached_input_micros_per_mtok == 0


@pytest.mark.django_db
def test_money_is_held_at_the_worst_of_the_prices_in_force_and_to_come():
    from billing.selectors import capped_spend_micros

    pool, org = PoolFactory(), OrganizationFactory()
    now = datetime(2026, 11, 20, 12, 30, tzinfo=UTC)
    PriceVersion.objects.create(pool=pool, effective_from=datetime(2026, 1, 1, tzinfo=UTC),
                                input_micros_per_mtok=5_000_000,
                                output_micros_per_mtok=30_000_000,
                                premium_output_micros_per_mtok=4_000_000)
    PriceVersion.objects.create(pool=pool, effective_from=datetime(2026, 11, 21, tzinfo=UTC),
                                input_micros_per_mtok=8_000_000,
                                output_micros_per_mtok=20_000_000)
    _, prices = capped_spend_micros(org_ids={org.pk}, pool_ids={pool.pk}, now=now)
    assert prices == {(org.pk, pool.pk): (8_000_000, 34_000_000)}
    other = PoolFactory()  # no version: list price, no premium
    _, prices = capped_spend_micros(org_ids={org.pk}, pool_ids={other.pk}, now=now)
    assert prices == {(org.pk, other.pk): (5_000_000, 30_000_000)}
