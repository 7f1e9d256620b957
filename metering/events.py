"""What the metering app announces (sluice/events.py says why events and how to subscribe)."""

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
    cached_input_tokens: int = 0  # of input_tokens


usage_recorded = Event(
    "metering.usage_recorded", payload=("cells",),
    doc="Usage events were recorded: emitted after their transaction committed, with the new "
        "usage only (a retried report adds nothing). Billing prices it into the orgs' month "
        "spend counters, so authorize refuses once a spend cap is reached.")

usage_month_retiring = Event(
    "metering.usage_month_retiring", payload=("month", "org_ids", "unbilled"),
    doc="The raw usage events of `month` (its first day) are past the retention and about to be "
        "dropped; `org_ids` are the orgs with usage in it. Receivers add to the set `unbilled` "
        "every org whose usage of that month is not invoiced yet: the month is kept while any "
        "is (metering/retention.py).")

usage_days_compacting = Event(
    "metering.usage_days_compacting", payload=("start", "end", "split_hours"),
    doc="Hourly rollups of the UTC days in [start, end) are about to be summed per day. "
        "Receivers add to the set `split_hours` every (pool id, hour) from which the pool's "
        "hours are read differently (billing: a price version starts); a day with one after "
        "its midnight stays hourly for that pool, so reading it per hour stays exact.")

refusals_drained = Event(
    "metering.refusals_drained", payload=("minute", "rows"),
    doc="A UTC minute's refusal counts were written to PostgreSQL (`rows`: RefusalMinute, each "
        "the minute's full count of one org, pool, API key and code), in the drain's "
        "transaction: a minute drained twice is emitted twice with the same counts. Webhooks "
        "tells orgs whose requests the admission queue refused.")
