"""booking.confirmed, .started, .ended and .cancelled reach the org's endpoints, once each,
signed like every event."""

from datetime import UTC, datetime, timedelta

import pytest

from billing.services import booking_confirm
from quotas.bookings import BookingAsk, booking_cancel, bookings_advance
from tests.factories import AllocationFactory, OrganizationFactory, PoolFactory
from tests.webhooks.test_webhooks import endpoint_for


@pytest.mark.django_db(transaction=True)
def test_a_booking_tells_its_whole_life(receiver):
    pool = PoolFactory(model="frontier-fast")
    org = OrganizationFactory()
    AllocationFactory(org=org, pool=pool, guaranteed_tps=1_000, burst_tps=1_000)
    endpoint_for(org, receiver)
    start = (datetime.now(UTC) + timedelta(days=2)).replace(minute=0, second=0, microsecond=0)
    kept = booking_confirm(org=org, pool=pool, actor="test", ask=BookingAsk(
        starts_at=start, ends_at=start + timedelta(hours=2), output_tps=500))
    dropped = booking_confirm(org=org, pool=pool, actor="test", ask=BookingAsk(
        starts_at=start + timedelta(days=1), ends_at=start + timedelta(days=1, hours=1),
        output_tps=100))
    booking_cancel(booking=dropped, actor="ops", by_operator=True, reason="maintenance")
    bookings_advance(now=start)
    bookings_advance(now=start + timedelta(hours=2))
    bookings_advance(now=start + timedelta(hours=2))  # nothing new
    assert receiver.types() == ["booking.confirmed", "booking.confirmed", "booking.cancelled",
                                "booking.started", "booking.ended"]
    confirmed = receiver.received[0]["data"]["booking"]
    assert confirmed["id"] == kept.pk
    assert confirmed["pool"]["model"] == "frontier-fast"
    assert (confirmed["output_tps"], confirmed["cost"]) == (
        500, {"value": 20.0, "currency": "usd"})  # 500 tokens/s x 2 h x $0.02
    cancelled = receiver.received[2]["data"]["booking"]
    assert (cancelled["cancelled_by"], cancelled["cancel_reason"], cancelled["refund"]) == (
        "operator", "maintenance", {"value": 2.0, "currency": "usd"})
    assert receiver.received[4]["data"]["booking"]["state"] == "ended"
