"""Booking capacity with its money: confirm (quote, spend cap, the ledger, the charge) and the
refund of a cancelled booking. The rules are billing/bookings.py's."""

import logging
from datetime import datetime
from functools import partial

from django.db import transaction
from django.utils import timezone

from billing.bookings import booking_price, booking_refund_percent
from billing.events import booking_cancelled, booking_confirmed
from billing.models import BookingCharge
from billing.notify import booking_cancelled_email_queue
from billing.periods import month_of
from billing.selectors import billing_spend_cap_micros, month_to_date_micros_by_org
from orgs.models import Organization
from orgs.services.audit import Actor, audit_record
from quotas.bookings import BookingAsk, booking_create
from quotas.limiter.clock import month_stamp
from quotas.limiter.connection import LimiterUnavailable
from quotas.models import Booking, CapacityPool
from quotas.publish import spend_add
from sluice.errors import Conflict, Unprocessable

logger = logging.getLogger(__name__)


def _spend_add_now(org_id: int, month: str, micros: int) -> None:
    try:
        spend_add(org_id=org_id, month=month, micros=micros)
    except LimiterUnavailable:
        # The periodic limiter sync raises the counter to the rated month, bookings included.
        logger.warning("booking: could not add %d micro-dollars to org %s's month", micros,
                       org_id)


def _spend_add_later(*, org_id: int, at: datetime, micros: int) -> None:
    """A capped org's month counter in the admission engine moves with the booking's money,
    after the commit (the caller knows the org is capped: authorize reads no other's)."""
    if micros:
        transaction.on_commit(partial(_spend_add_now, org_id, month_stamp(at), micros))


def _spend_cap_check(*, org: Organization, cap: int, amount_micros: int, now: datetime) -> None:
    if not cap:
        return
    spent = month_to_date_micros_by_org(org_ids={org.pk}, now=now)[org.pk]
    if spent + amount_micros > cap:
        raise Unprocessable(
            f"This booking would take the month's spend past the cap: {amount_micros:,} "
            f"micro-dollars on top of {spent:,}, with a cap of {cap:,}.",
            code="spend_cap_exceeded",
            details={"cap_micros": cap, "cost_micros": spent, "quote_micros": amount_micros,
                     "month": month_of(now).isoformat()})


@transaction.atomic(durable=True)
def booking_confirm(*, org: Organization, pool: CapacityPool, ask: BookingAsk, actor: Actor,
                    quote_micros: int | None = None, now: datetime | None = None) -> Booking:
    """Book `ask` for `org`: refused if it can never be (4xx, quotas.bookings), without room at
    some instant of the window (409 `booking_no_room`, the window's free headroom in
    `details`), if the price moved since the org's quote (`quote_micros`, 409
    `quote_changed`) or past the spend cap (422 `spend_cap_exceeded`). Nothing is written
    then: a refusal after the ledger's insert rolls it back with the rest."""
    now = now or timezone.now()
    # The ledger takes the house's locks, the pool then the org: bookings and grants of the
    # pool serialize on the first, and two bookings of one org in two pools cannot both pass
    # its spend cap below.
    booking = booking_create.nested(org=org, pool=pool, ask=ask, actor=actor, now=now)
    amount, price = booking_price(org=org, pool=pool, ask=ask)
    if quote_micros is not None and quote_micros != amount:
        raise Conflict("The price changed since the quote: quote again.", code="quote_changed",
                       details={"quote_micros": quote_micros, "amount_micros": amount})
    cap = billing_spend_cap_micros(org=org)
    _spend_cap_check(org=org, cap=cap, amount_micros=amount, now=now)
    charge = BookingCharge.objects.create(booking=booking, org=org,
                                          price_version_id=price.version_id,
                                          amount_micros=amount, charged_at=now)
    audit_record(actor=actor, action="billing.booking_charge", target=booking, org=org,
                 after={"amount_micros": amount, "price_version": price.version_id})
    if cap:
        _spend_add_later(org_id=org.pk, at=now, micros=amount)
    booking_confirmed.emit(booking=booking, charge=charge)
    return booking


def booking_refund(*, booking: Booking) -> BookingCharge | None:
    """Receiver of quotas' `booking_cancelled`, in the cancelling transaction: refund the
    charge by the rule, tell the org when it did not cancel itself, announce it."""
    charge = BookingCharge.objects.select_for_update().filter(booking=booking).first()
    if charge is not None and charge.refunded_at is None:
        percent = booking_refund_percent(booking=booking, at=booking.cancelled_at)
        charge.refund_micros = charge.amount_micros * percent // 100
        charge.refunded_at = booking.cancelled_at
        charge.save(update_fields=["refund_micros", "refunded_at"])
        audit_record(actor="billing", action="billing.booking_refund", target=booking,
                     org=booking.org, after={"refund_micros": charge.refund_micros,
                                             "percent": percent})
        if billing_spend_cap_micros(org=booking.org_id):
            _spend_add_later(org_id=booking.org_id, at=charge.refunded_at,
                             micros=-charge.refund_micros)
    if booking.cancelled_by_operator:
        booking_cancelled_email_queue(booking=booking)
    booking_cancelled.emit(booking=booking, charge=charge)
    return charge
