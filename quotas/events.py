"""What the quotas app announces (sluice/events.py says why events and how to subscribe)."""

from dataclasses import dataclass
from datetime import datetime

from sluice.events import Event


@dataclass(frozen=True, slots=True)
class UsageCell:
    """Newly recorded usage of one org in one pool and UTC hour: the cells of the hourly
    rollups, so whoever prices them prices what the invoice will."""
    org_id: int
    pool_id: int
    hour: datetime
    input_tokens: int
    output_tokens: int
    premium_input_tokens: int
    premium_output_tokens: int


usage_recorded = Event(
    "quotas.usage_recorded", payload=("cells",),
    doc="Usage events were recorded: emitted after their transaction committed, with the new "
        "usage only (a retried report adds nothing). Billing prices it into the orgs' month "
        "spend counters, so authorize refuses once a spend cap is reached.")

limits_publishing = Event(
    "quotas.limits_publishing", payload=("org_ids", "now", "spend"),
    doc="The bridge (quotas/publish.py) is about to write these orgs' state into the admission "
        "engine, outside any transaction. Receivers fill `spend`, a dict org id -> (monthly "
        "spend cap, month-to-date spend) in micro-dollars, for the orgs that have a cap; the "
        "others are published without one. It is one script call per org and pool, so the cap "
        "never reaches Redis apart from the rest of the org's state.")

wave_opened = Event(
    "quotas.wave_opened", payload=("wave", "org_ids"),
    doc="A rollout wave opened and admitted these orgs (emitted in the opening transaction).")
