"""What the orgs app announces (sluice/events.py says why events and how to subscribe).
Emitted inside the transaction that makes the change."""

from sluice.events import Event

org_transitioned = Event(
    "orgs.org_transitioned", payload=("org", "action", "actor", "reason"),
    doc="An organization moved through its lifecycle (orgs.services.lifecycle.TRANSITIONS). "
        "`org` has its new status.")

org_service_stopping = Event(
    "orgs.org_service_stopping", payload=("org", "action", "actor", "reason", "break_bookings"),
    doc="The org is being suspended or offboarded in this transaction (`org` has its new "
        "status; `org_transitioned` follows): its traffic stops. `break_bookings` are the ids "
        "of the bookings the operator names as broken by it. A receiver refuses by raising a "
        "DomainError (nothing changes): quotas does while a booking of the org that has not "
        "ended is not named, and cancels the named ones with a full refund.")

api_keys_changed = Event(
    "orgs.api_keys_changed", payload=("org_id",),
    doc="An API key of the org was created, revoked or changed.")

key_creating = Event(
    "orgs.key_creating", payload=("org", "actor"),
    doc="An API key or an admin key of the org is about to be created by `actor` (a user, or "
        "a label: an admin key, a command). A receiver refuses by raising a DomainError "
        "(nothing is created).")

api_key_slice_checking = Event(
    "orgs.api_key_slice_checking", payload=("key", "key_slice"),
    doc="An API key is about to get its own slice of its org's limits (`key_slice`, an "
        "orgs.services.api_keys.KeySlice; None fields are no limit of its own). A receiver "
        "refuses a slice beyond the org's allocation by raising a DomainError (nothing "
        "changes).")

org_transition_requested = Event(
    "orgs.org_transition_requested", payload=("org", "action"),
    doc="An operator asked for a lifecycle action by name (`org_transition`, the console's and "
        "the REST API's button), before it is taken. A receiver may refuse it by raising a "
        "DomainError: rollout does while the org has an open application, whose decision moves "
        "the org instead.")

org_contact_reading = Event(
    "orgs.org_contact_reading", payload=("org", "contact"),
    doc="An email to the org is being built. Receivers may set `contact['name']` and "
        "`contact['email']`, the person who speaks for the org (rollout: the contact of its "
        "latest application); the org's owners get the email too.")
