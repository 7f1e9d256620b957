"""What billing does when a lower app announces something (subscribed in BillingConfig.ready())."""

import logging
from collections import defaultdict
from datetime import date, datetime

from billing.rating import UsageRow
from billing.selectors import (
    billing_spend_caps_micros,
    capped_spend_micros,
    orgs_without_invoice,
    price_changes_between,
    usage_batch_cost_micros,
)
from billing.services import stripe_customer_enqueue
from metering.events import UsageCell
from quotas.limiter.clock import month_stamp
from quotas.limiter.connection import LimiterUnavailable
from quotas.publish import spend_add

logger = logging.getLogger(__name__)


def org_transitioned_received(*, org, action: str, actor, reason: str) -> None:
    if action == "admit":
        # In the admitting transaction: the outbox row commits with the admission, and the
        # Stripe customer is created after the commit.
        stripe_customer_enqueue(org_id=org.pk)


def limits_publishing_received(*, org_ids: frozenset[int], pool_ids: frozenset[int],
                               now: datetime, spend: dict[int, tuple[int, int]],
                               prices: dict[tuple[int, int], tuple[int, int]]) -> None:
    """For the capped orgs: the spend cap and the rated month-to-date (a publish raises the
    engine's month counter to it, which rebuilds a flushed counter and repairs increments lost
    while Redis was unreachable), and the worst-case prices authorize reserves money at.
    Uncapped orgs are skipped: authorize never reads their counter and holds no money."""
    caps = billing_spend_caps_micros(org_ids=set(org_ids))
    month_to_date, worst_prices = capped_spend_micros(org_ids=set(caps), pool_ids=set(pool_ids),
                                                      now=now)
    spend.update({org_id: (cap, month_to_date[org_id]) for org_id, cap in caps.items()})
    prices.update(worst_prices)


def usage_recorded_received(*, cells: list[UsageCell]) -> None:
    """Price newly recorded usage with the invoice's rating and add it to each capped org's
    month counter, so authorize refuses (`spend_cap_reached`) as usage settles, not after a
    batch job. Setting a cap republishes the org, which raises the counter to the rated
    month-to-date, so skipping uncapped orgs here loses nothing."""
    capped = billing_spend_caps_micros(org_ids={c.org_id for c in cells})
    usage: dict[tuple[int, str], list[UsageRow]] = defaultdict(list)
    for c in cells:
        if c.org_id in capped:
            usage[(c.org_id, month_stamp(c.hour))].append(UsageRow(
                c.pool_id, c.hour, c.input_tokens, c.output_tokens, c.premium_input_tokens,
                c.premium_output_tokens, c.cached_input_tokens))
    for (org_id, month), rows in usage.items():
        micros = usage_batch_cost_micros(org_id=org_id, usage=rows)
        try:
            spend_add(org_id=org_id, month=month, micros=micros)
        except LimiterUnavailable:
            # The periodic limiter sync raises the counter to the rated figure again.
            logger.warning("usage: could not add %d micro-dollars to org %s's month",
                           micros, org_id)


def usage_month_retiring_received(*, month: date, org_ids: set[int], unbilled: set[int]) -> None:
    """Raw events outlive nothing billing needs (invoices rate the rollups), but until a month
    is invoiced they are what a dispute over it would be settled with: keep them till then."""
    unbilled.update(orgs_without_invoice(org_ids=org_ids, month=month))


def usage_days_compacting_received(*, start: datetime, end: datetime,
                                   split_hours: set[tuple[int, datetime]]) -> None:
    """Rating prices each rollup row with the version in force at its hour: a day whose prices
    change after midnight must keep its hours (versions never start in the past, so no new
    change can appear in a day already compacted)."""
    split_hours.update(price_changes_between(start=start, end=end))
