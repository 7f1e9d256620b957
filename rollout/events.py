"""What the rollout app announces (sluice/events.py says why events and how to subscribe)."""

from sluice.events import Event

wave_opened = Event(
    "rollout.wave_opened", payload=("wave", "org_ids"),
    doc="A rollout wave opened and admitted these orgs (emitted in the opening transaction).")
