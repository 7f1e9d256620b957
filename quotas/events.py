"""What the quotas app announces (sluice/events.py says why events and how to subscribe)."""

from sluice.events import Event

limits_publishing = Event(
    "quotas.limits_publishing", payload=("org_ids", "pool_ids", "now", "spend", "prices"),
    doc="The bridge (quotas/publish.py) is about to write these orgs' state in these pools into "
        "the admission engine, outside any transaction. Receivers fill, for the orgs that have "
        "a spend cap: `spend`, a dict org id -> (monthly spend cap, month-to-date spend), and "
        "`prices`, a dict (org id, pool id) -> (input, output) per million tokens, premium "
        "included: the most a reservation may cost, which authorize holds against the cap "
        "(all in micro-dollars). The others are published without a cap. It is one script call "
        "per org and pool, so the cap never reaches Redis apart from the rest of the org's "
        "state.")

day_usage_reading = Event(
    "quotas.day_usage_reading", payload=("org_ids", "pool_ids", "day_start", "used"),
    doc="The bridge (quotas/publish.py) is about to publish these orgs' state in these pools and "
        "asks what they used this UTC day (from `day_start`). Receivers add to the dict `used` "
        "the tokens recorded per (org id, pool id) and per (org id, pool id, API key id), so a "
        "pool rebuilt after Redis lost its counters starts the day from what was recorded.")

capacity_freed = Event(
    "quotas.capacity_freed", payload=("pool_id",),
    doc="An allocation in the pool ended or shrank, in this transaction: guarantees are free "
        "again. Rollout admits the next queued orgs of a pool with auto-admission, after the "
        "commit.")

booking_cancelled = Event(
    "quotas.booking_cancelled", payload=("booking",),
    doc="A booking was cancelled in this transaction (by its org, by an operator, or by a "
        "change that breaks it: its pool's capacity lowered, its allocation ended or "
        "shortened, its org suspended or offboarded; then `booking.cancelled_by_operator`). "
        "Billing refunds it and tells the org.")

booking_started = Event(
    "quotas.booking_started", payload=("booking",),
    doc="A booking's window began (recorded by bookings_advance within a minute; the limiter "
        "applied it at its first second).")

booking_ended = Event(
    "quotas.booking_ended", payload=("booking",),
    doc="A booking's window ended (recorded by bookings_advance within a minute; the limiter "
        "stopped applying it at its last second).")
