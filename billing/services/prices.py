"""The price book: versions are added, never edited."""

from datetime import datetime

from django.db import IntegrityError, transaction
from django.utils import timezone

from billing.models import BillingAccount, PriceVersion
from billing.rating import (
    LIST_BOOKING_INPUT_MICROS_PER_TPS_HOUR,
    LIST_BOOKING_OUTPUT_MICROS_PER_TPS_HOUR,
)
from orgs.models import Organization
from orgs.services.audit import Actor, audit_record
from quotas.models import Allocation, CapacityPool
from quotas.publish import limits_publish_org_later
from sluice.errors import Conflict, Unprocessable
from sluice.transactions import nestable


def _hour_floor(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def _refuse_start(message: str, *, code: str, effective_from: datetime) -> None:
    raise Unprocessable(message, code=code, fields={"effective_from": [message]},
                        details={"effective_from": effective_from.isoformat()})


def _capped_orgs_publish_later(*, pool: CapacityPool, org: Organization | None) -> None:
    """The admission engine holds money at the worst case of the pool's prices for capped orgs
    (billing fills them in on every publish, through quotas' `limits_publishing`): republish
    the capped orgs of the pool after the commit."""
    holders = Allocation.objects.filter(pool=pool).values("org_id")
    if org is not None:
        holders = holders.filter(org=org)
    for org_id in (BillingAccount.objects.filter(org_id__in=holders, spend_cap_micros__gt=0)
                   .values_list("org_id", flat=True)):
        limits_publish_org_later(org_id=org_id)


@nestable
@transaction.atomic(durable=True)
def price_version_create(
    *, pool: CapacityPool, effective_from: datetime, input_micros_per_mtok: int,
    output_micros_per_mtok: int, premium_input_micros_per_mtok: int = 0,
    premium_output_micros_per_mtok: int = 0, org: Organization | None = None,
    note: str = "", actor: Actor, now: datetime | None = None,
    cached_input_micros_per_mtok: int | None = None,
    booking_output_micros_per_tps_hour: int = LIST_BOOKING_OUTPUT_MICROS_PER_TPS_HOUR,
    booking_input_micros_per_tps_hour: int = LIST_BOOKING_INPUT_MICROS_PER_TPS_HOUR,
) -> PriceVersion:
    """A new version from `effective_from`, which must be a whole hour (so an hourly rollup is
    never split between two prices) and not before the current hour (history is not rewritten:
    hours already metered keep the price they were metered at). Cached input tokens get their
    own price (None: the input price); booked capacity is priced per token/s and hour."""
    now = now or timezone.now()
    if effective_from != _hour_floor(effective_from):
        _refuse_start("A price version starts on a whole hour (minutes and seconds 0).",
                      code="price_not_on_hour", effective_from=effective_from)
    if effective_from < _hour_floor(now):
        _refuse_start("A price version cannot start in an hour that has begun.",
                      code="price_in_past", effective_from=effective_from)
    try:
        with transaction.atomic():
            version = PriceVersion.objects.create(
                pool=pool, org=org, effective_from=effective_from,
                input_micros_per_mtok=input_micros_per_mtok,
                cached_input_micros_per_mtok=cached_input_micros_per_mtok,
                output_micros_per_mtok=output_micros_per_mtok,
                premium_input_micros_per_mtok=premium_input_micros_per_mtok,
                premium_output_micros_per_mtok=premium_output_micros_per_mtok,
                booking_output_micros_per_tps_hour=booking_output_micros_per_tps_hour,
                booking_input_micros_per_tps_hour=booking_input_micros_per_tps_hour,
                note=note, created_by=actor if not isinstance(actor, str | None) else None)
    except IntegrityError:
        raise Conflict("A version of these prices already starts at that hour.",
                       code="price_version_exists") from None
    audit_record(actor=actor, action="billing.price_version_create", target=version, org=org,
                 after={"pool": pool.pk, "effective_from": effective_from.isoformat(),
                        "input": input_micros_per_mtok,
                        "cached_input": cached_input_micros_per_mtok,
                        "output": output_micros_per_mtok,
                        "premium_input": premium_input_micros_per_mtok,
                        "premium_output": premium_output_micros_per_mtok,
                        "booking_output": booking_output_micros_per_tps_hour,
                        "booking_input": booking_input_micros_per_tps_hour})
    _capped_orgs_publish_later(pool=pool, org=org)
    return version
