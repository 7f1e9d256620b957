"""Billing: price book, rating, invoices, spend caps, Stripe (outbox + webhooks), dunning.

What the admission engine and usage ingestion use (the only entry points from quotas):
- `billing.selectors.billing_spend_cap_micros(*, org) -> int`: the monthly cap in micro-dollars,
  0 = no cap. `spend_cap_set` calls `limits_changed_on_commit(org_id=)` so the engine re-reads it.
- `billing.selectors.usage_batch_cost_micros(*, org_id, usage: list[UsageRow]) -> int`: what a
  batch of newly ingested usage of ONE org adds to its month counter (`spend_add(micros=)`),
  using the org's prices and discount; it wraps the pure `billing.rating.usage_cost_micros`.
  Months are UTC calendar months: count a row in `billing.periods.month_of(row.hour)`.
"""
