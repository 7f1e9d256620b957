"""Billing feeds the admission engine's spend counters through quotas' events: the month-to-date
of many capped orgs in a constant number of queries, equal to what the invoice rates."""

from datetime import UTC, datetime, timedelta

from billing.models import BillingAccount, PriceVersion
from billing.periods import month_of
from billing.rating import PICO_PER_MICRO
from billing.receivers import limits_publishing_received
from billing.selectors import month_rated_lines, month_to_date_micros_by_org
from tests.billing.conftest import usage_add
from tests.factories import OrganizationFactory

NOW = datetime(2026, 11, 20, 12, tzinfo=UTC)


def _orgs_with_usage(pool, n: int):
    orgs = [OrganizationFactory() for _ in range(n)]
    for i, org in enumerate(orgs):
        for hour in range(3):
            usage_add(org=org, pool=pool, hour=NOW - timedelta(days=i, hours=hour),
                      i=1_000 * (i + 1), o=333 * (hour + 1), po=100)
    return orgs


def test_many_orgs_month_to_date_matches_the_invoice_rating(pool, premium_price):
    orgs = _orgs_with_usage(pool, 3)
    # A negotiated price for one org and a discount for another.
    PriceVersion.objects.create(
        pool=pool, org=orgs[1], effective_from=datetime(2026, 11, 1, tzinfo=UTC),
        input_micros_per_mtok=4_000_000, output_micros_per_mtok=25_000_000)
    BillingAccount.objects.create(org=orgs[2], discount_bps=1_250)
    found = month_to_date_micros_by_org(org_ids={o.pk for o in orgs}, now=NOW)
    for org in orgs:
        lines = month_rated_lines(org=org, month=month_of(NOW), until=NOW)
        assert found[org.pk] == -(-sum(ln.amount_pico for ln in lines) // PICO_PER_MICRO) > 0


def test_publishing_capped_orgs_costs_the_same_queries_for_one_or_ten(
        pool, premium_price, django_assert_max_num_queries):
    orgs = _orgs_with_usage(pool, 10)
    for org in orgs:
        BillingAccount.objects.create(org=org, spend_cap_micros=10**9)
    spend: dict = {}
    prices: dict = {}
    with django_assert_max_num_queries(5):  # caps, usage, prices, discounts, booking charges
        limits_publishing_received(org_ids=frozenset(o.pk for o in orgs),
                                   pool_ids=frozenset({pool.pk}), now=NOW, spend=spend,
                                   prices=prices)
    assert set(spend) == {o.pk for o in orgs}
    assert set(prices) == {(o.pk, pool.pk) for o in orgs}
    assert all(cap == 10**9 and month_to_date > 0 for cap, month_to_date in spend.values())


def test_uncapped_orgs_are_published_without_a_cap(pool):
    capped, uncapped = OrganizationFactory(), OrganizationFactory()
    BillingAccount.objects.create(org=capped, spend_cap_micros=5_000_000)
    BillingAccount.objects.create(org=uncapped)
    spend: dict = {}
    prices: dict = {}
    limits_publishing_received(org_ids=frozenset({capped.pk, uncapped.pk}),
                               pool_ids=frozenset({pool.pk}), now=NOW, spend=spend,
                               prices=prices)
    assert spend == {capped.pk: (5_000_000, 0)}
    assert set(prices) == {(capped.pk, pool.pk)}
