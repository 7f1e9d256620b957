"""What webhooks does when orgs, quotas and billing announce something (subscribed in
WebhooksConfig.ready()). Each receiver records its event in the announcing transaction."""

from datetime import date

from billing.models import BookingCharge, Invoice
from metering.events import UsageCell
from metering.usage_report import SERVICE_TIERS
from orgs.models import Organization
from quotas.models import Booking
from rollout.models import RolloutWave
from webhooks.models import EventType
from webhooks.producers import daily_quota_thresholds_announce, queue_refusals_announce
from webhooks.services import webhook_event_record

ORG_ACTIONS = {"admit": EventType.ORG_ADMITTED, "suspend": EventType.ORG_SUSPENDED,
               "restore": EventType.ORG_RESTORED}


def _org(org: Organization) -> dict:
    return {"id": org.pk, "name": org.name, "status": org.status,
            "suspension_reason": org.suspension_reason or None}


def _invoice(invoice: Invoice) -> dict:
    return {"invoice": {"id": invoice.pk, "number": invoice.number, "status": invoice.status,
                        "period_start": invoice.period_start.isoformat(),
                        "total": {"value": invoice.total_cents / 100,
                                  "currency": invoice.currency},
                        "replaces": invoice.replaces.number if invoice.replaces_id else None,
                        "supplements": (invoice.supplements.number if invoice.supplements_id
                                        else None)}}


def org_transitioned_received(*, org, action: str, actor, reason: str) -> None:
    event_type = ORG_ACTIONS.get(action)
    if event_type:
        # The operator's reason stays internal; the org learns the new status and its cause.
        webhook_event_record(org_id=org.pk, type=event_type,
                             key=f"{event_type}:{org.status_changed_at.isoformat()}",
                             data={"organization": _org(org)})


def wave_opened_received(*, wave: RolloutWave, org_ids: list[int]) -> None:
    for org_id in org_ids:
        webhook_event_record(org_id=org_id, type=EventType.WAVE_ADMITTED,
                             key=f"{EventType.WAVE_ADMITTED}:{wave.pk}",
                             data={"wave": {"id": wave.pk, "name": wave.name,
                                            "pool": wave.pool_id}})


def invoice_issued_received(*, invoice: Invoice) -> None:
    webhook_event_record(org_id=invoice.org_id, type=EventType.INVOICE_ISSUED,
                         key=f"{EventType.INVOICE_ISSUED}:{invoice.pk}", data=_invoice(invoice))


def invoice_paid_received(*, invoice: Invoice) -> None:
    webhook_event_record(org_id=invoice.org_id, type=EventType.INVOICE_PAID,
                         key=f"{EventType.INVOICE_PAID}:{invoice.pk}", data=_invoice(invoice))


def invoice_payment_failed_received(*, invoice: Invoice) -> None:
    webhook_event_record(org_id=invoice.org_id, type=EventType.INVOICE_PAYMENT_FAILED,
                         key=f"{EventType.INVOICE_PAYMENT_FAILED}:{invoice.pk}",
                         data=_invoice(invoice))


def spend_threshold_crossed_received(*, org_id: int, month: date, threshold: int,
                                     cost_micros: int, cap_micros: int) -> None:
    webhook_event_record(
        org_id=org_id, type=EventType.SPEND_THRESHOLD,
        key=f"{EventType.SPEND_THRESHOLD}:{month:%Y-%m}:{threshold}",
        data={"threshold_percent": threshold, "month": f"{month:%Y-%m}",
              "cost": {"value": cost_micros / 1_000_000, "currency": "usd"},
              "spend_cap": {"value": cap_micros / 1_000_000, "currency": "usd"}})


def _money(micros: int | None) -> dict | None:
    return None if micros is None else {"value": micros / 1_000_000, "currency": "usd"}


def _booking(booking: Booking, charge: BookingCharge | None) -> dict:
    pool = booking.pool
    return {"booking": {
        "id": booking.pk, "state": booking.state,
        "pool": {"id": pool.pk, "model": pool.model, "region": pool.region,
                 "service_tier": SERVICE_TIERS.get(pool.tier)},
        "starts_at": booking.starts_at.isoformat(), "ends_at": booking.ends_at.isoformat(),
        "output_tps": booking.output_tps, "input_tps": booking.input_tps,
        "extra_daily_tokens": booking.extra_daily_tokens,
        "cost": _money(charge.amount_micros if charge else None),
        "refund": _money(charge.refund_micros if charge and charge.refunded_at else None),
        "cancelled_by": (None if booking.cancelled_at is None
                         else "operator" if booking.cancelled_by_operator else "organization"),
        "cancel_reason": booking.cancel_reason or None}}


def _booking_event(event_type: str, booking: Booking, charge: BookingCharge | None) -> None:
    webhook_event_record(org_id=booking.org_id, type=event_type,
                         key=f"{event_type}:{booking.pk}", data=_booking(booking, charge))


def booking_confirmed_received(*, booking: Booking, charge: BookingCharge) -> None:
    _booking_event(EventType.BOOKING_CONFIRMED, booking, charge)


def booking_cancelled_received(*, booking: Booking, charge: BookingCharge | None) -> None:
    _booking_event(EventType.BOOKING_CANCELLED, booking, charge)


def booking_started_received(*, booking: Booking) -> None:
    _booking_event(EventType.BOOKING_STARTED, booking,
                   BookingCharge.objects.filter(booking=booking).first())


def booking_ended_received(*, booking: Booking) -> None:
    _booking_event(EventType.BOOKING_ENDED, booking,
                   BookingCharge.objects.filter(booking=booking).first())


def usage_recorded_received(*, cells: list[UsageCell]) -> None:
    """After the usage batch committed (outside any transaction)."""
    daily_quota_thresholds_announce(cells=cells)


def refusals_drained_received(*, minute, rows) -> None:
    """In the drain's transaction."""
    queue_refusals_announce(minute=minute, rows=rows)
