"""What quotas does when orgs announces something (subscribed in QuotasConfig.ready())."""

from django.utils import timezone

from quotas.bookings import bookings_break_named
from quotas.ledger import bookings_relying_on
from quotas.publish import limits_publish_org_later
from quotas.selectors import org_allocation_maxima
from quotas.services import allocations_end_for_org
from sluice.errors import Unprocessable


def org_transitioned_received(*, org, action: str, actor, reason: str) -> None:
    # Redis learns the new status after the commit: a suspension stops traffic within a second.
    limits_publish_org_later(org_id=org.pk)
    if action == "offboard":
        # Offboarding returns the org's guarantees to its pools, in the same transaction.
        allocations_end_for_org(org=org, actor=actor, reason="organization offboarded")


def org_service_stopping_received(*, org, action: str, actor, reason: str,
                                  break_bookings) -> None:
    """A suspended or offboarded org cannot use what it booked: every booking of it that has not
    ended must be named, and is cancelled with a full refund and a notice."""
    verb = {"suspend": "suspended", "offboard": "offboarded"}[action]
    bookings_break_named(
        conflicts=bookings_relying_on(org_id=org.pk, ending_after=timezone.now()),
        named=break_bookings, actor=actor, code="org_has_bookings",
        message=f"{org.name} has bookings that have not ended: being {verb} breaks them.",
        reason=f"Your organization was {verb}" + (f": {reason}" if reason else "."))


def api_keys_changed_received(*, org_id: int) -> None:
    limits_publish_org_later(org_id=org_id)


def api_key_slice_checking_received(*, key, key_slice) -> None:
    """A key's slice fits within its org's allocation: no limit above the largest the org holds
    in any pool in force (in a pool with a smaller allocation the org's limit is the tighter,
    and the engine enforces both)."""
    largest = org_allocation_maxima(org_id=key.org_id)
    errors = {}
    for field, value, most in (
            ("slice_output_tps", key_slice.output_tps, largest.burst_tps),
            ("slice_input_tps", key_slice.input_tps, largest.burst_input_tps),
            ("slice_daily_tokens", key_slice.daily_tokens, largest.daily_tokens),
            ("slice_max_concurrency", key_slice.max_concurrency, largest.max_concurrency)):
        if value is not None and value > (most or 0):
            errors[field] = [f"Above the organization's allocation ({most or 0})."]
    if errors:
        raise Unprocessable("A key's slice must fit within its organization's allocation.",
                            code="key_slice_above_allocation", fields=errors,
                            details={"allocation": largest._asdict()})
