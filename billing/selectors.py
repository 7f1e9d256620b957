"""Reads of billing data, always scoped to an org or an operator's view."""

from collections import defaultdict
from datetime import date, datetime, timedelta

from django.db import connection
from django.db.models import Prefetch, Q, QuerySet, Sum

from billing.models import (
    BillingAccount,
    BookingCharge,
    Invoice,
    InvoiceLine,
    InvoiceStatus,
    LineKind,
    OutboxMessage,
    OutboxStatus,
    PriceVersion,
    StripeEvent,
    StripeEventStatus,
)
from billing.periods import month_bounds, month_of
from billing.rating import (
    PICO_PER_MICRO,
    BookingLine,
    Price,
    RatedLine,
    UsageRow,
    price_for,
    rate_usage,
    usage_cost_micros,
)
from metering.models import UsageHourly
from orgs.auth import AdminKeyPrincipal
from orgs.models import BILLING_READERS, Membership, Organization
from sluice.sql import bigint_array


def billing_spend_caps_micros(*, org_ids: set[int]) -> dict[int, int]:
    """org id -> monthly spend cap in micro-dollars, for the capped orgs among `org_ids` (the
    others have none). What the admission engine compares its month counters with. One query,
    per usage batch on the ingestion path (plain SQL: building the ORM query cost more than
    running it)."""
    if not org_ids:
        return {}
    with connection.cursor() as cursor:
        table = BillingAccount._meta.db_table  # a model constant, not input
        cursor.execute(f"SELECT org_id, spend_cap_micros FROM {table} "  # noqa: S608
                       "WHERE org_id = ANY(%s::bigint[]) AND spend_cap_micros > 0",
                       [bigint_array(org_ids)])
        return dict(cursor.fetchall())


def billing_spend_cap_micros(*, org: Organization | int) -> int:
    """One org's monthly spend cap in micro-dollars; 0 = no cap."""
    org_id = org if isinstance(org, int) else org.pk
    return billing_spend_caps_micros(org_ids={org_id}).get(org_id, 0)


def billing_account_or_default(*, org: Organization) -> BillingAccount:
    """The org's account, or an unsaved one with the defaults: reading never writes."""
    return BillingAccount.objects.filter(org=org).first() or BillingAccount(org=org)


def billing_discount_bps(*, org: Organization) -> int:
    return BillingAccount.objects.filter(org=org).values_list("discount_bps",
                                                              flat=True).first() or 0


def price_list_for(*, org_id: int, pool_ids: set[int] | None = None) -> list[Price]:
    """Every public version of the pools, plus the org's negotiated ones."""
    versions = PriceVersion.objects.filter(Q(org__isnull=True) | Q(org_id=org_id))
    if pool_ids is not None:
        versions = versions.filter(pool_id__in=pool_ids)
    return [_price(v) for v in versions]


def _price(v: PriceVersion) -> Price:
    return Price(pool_id=v.pool_id, effective_from=v.effective_from,
                 input=v.input_micros_per_mtok, output=v.output_micros_per_mtok,
                 cached_input=v.cached_input_micros_per_mtok,
                 premium_input=v.premium_input_micros_per_mtok,
                 premium_output=v.premium_output_micros_per_mtok,
                 booking_output=v.booking_output_micros_per_tps_hour,
                 booking_input=v.booking_input_micros_per_tps_hour,
                 org_specific=v.org_id is not None, version_id=v.pk)


def usage_rows_for(*, org: Organization, start: datetime, end: datetime) -> list[UsageRow]:
    """Hourly usage summed over API keys: rating does not care which key spent it."""
    rows = (UsageHourly.objects.filter(org=org, hour__gte=start, hour__lt=end)
            .values("pool_id", "hour")
            .annotate(i=Sum("input_tokens"), o=Sum("output_tokens"),
                      pi=Sum("premium_input_tokens"), po=Sum("premium_output_tokens"),
                      ci=Sum("cached_input_tokens"))
            .order_by())
    return [UsageRow(pool_id=r["pool_id"], hour=r["hour"], input_tokens=r["i"],
                     output_tokens=r["o"], premium_input_tokens=r["pi"],
                     premium_output_tokens=r["po"], cached_input_tokens=r["ci"]) for r in rows]


def booking_description(booking) -> str:
    return (f"{booking.pool} · {booking.starts_at:%Y-%m-%d %H:%M}–"
            f"{booking.ends_at:%Y-%m-%d %H:%M} UTC · {booking.output_tps:,} tokens/s"
            + (f", {booking.input_tps:,} input tokens/s" if booking.input_tps else ""))


def booking_lines_by_org(*, org_ids: set[int], start: datetime, end: datetime
                         ) -> dict[int, list[BookingLine]]:
    """The booking charges and refunds of these orgs dated in [start, end): one query."""
    lines: dict[int, list[BookingLine]] = defaultdict(list)
    charged = Q(charged_at__gte=start, charged_at__lt=end)
    refunded = Q(refunded_at__gte=start, refunded_at__lt=end, refund_micros__gt=0)
    for charge in (BookingCharge.objects.select_related("booking__pool")
                   .filter(charged | refunded, org_id__in=org_ids)):
        booking, line = charge.booking, {"booking_id": charge.booking_id,
                                         "pool_id": charge.booking.pool_id,
                                         "price_version_id": charge.price_version_id}
        if start <= charge.charged_at < end:
            lines[charge.org_id].append(BookingLine(
                kind="booking", amount_micros=charge.amount_micros, at=charge.charged_at,
                description=booking_description(booking), **line))
        if charge.refund_micros and start <= charge.refunded_at < end:
            lines[charge.org_id].append(BookingLine(
                kind="booking_refund", amount_micros=-charge.refund_micros,
                at=charge.refunded_at, description=booking_description(booking), **line))
    return lines


def month_rated_lines(*, org: Organization, month: date,
                      until: datetime | None = None) -> list[RatedLine]:
    """The lines of `month` so far: the month-to-date view and the monthly close both call
    this, so they cannot disagree."""
    start, end = month_bounds(month)
    if until is not None:
        end = min(end, until)
    usage = usage_rows_for(org=org, start=start, end=end)
    prices = price_list_for(org_id=org.pk, pool_ids={row.pool_id for row in usage})
    bookings = booking_lines_by_org(org_ids={org.pk}, start=start, end=end)[org.pk]
    return rate_usage(usage=usage, prices=prices, discount_bps=billing_discount_bps(org=org),
                      bookings=bookings)


def month_invoiced_lines(*, org: Organization, month: date) -> list[InvoiceLine]:
    """Every line of the live invoices of `org`'s `month`: its invoice and the supplements of
    usage reported after it."""
    return list(InvoiceLine.objects.filter(invoice__org=org, invoice__period_start=month)
                .exclude(invoice__status=InvoiceStatus.VOID))


def credit_balance_cents(*, org: Organization) -> int:
    """The credit the org's live invoices carried and have not used yet (the credit lines of
    billing/services/invoices.py). A voided invoice's credit lines no longer count: its
    re-issue carries or uses them again."""
    return (InvoiceLine.objects.filter(
        invoice__org=org, kind__in=[LineKind.CREDIT_CARRIED, LineKind.CREDIT_APPLIED])
        .exclude(invoice__status=InvoiceStatus.VOID)
        .aggregate(c=Sum("amount_cents"))["c"] or 0)


def price_changes_between(*, start: datetime, end: datetime) -> set[tuple[int, datetime]]:
    """(pool id, hour) of every price version, public or negotiated, starting in [start, end)."""
    return set(PriceVersion.objects.filter(effective_from__gte=start, effective_from__lt=end)
               .values_list("pool_id", "effective_from"))


def orgs_without_invoice(*, org_ids: set[int], month: date) -> set[int]:
    """The orgs among `org_ids` with no live (open or paid) invoice for `month`."""
    invoiced = (Invoice.objects.filter(org_id__in=org_ids, period_start=month)
                .exclude(status=InvoiceStatus.VOID).values_list("org_id", flat=True))
    return set(org_ids) - set(invoiced)


def usage_batch_cost_micros(*, org_id: int, usage: list[UsageRow]) -> int:
    """What a batch of newly ingested usage adds to the org's month counter (micro-dollars):
    the org's prices and discount applied by the pure `rating.usage_cost_micros`."""
    if not usage:
        return 0
    prices = price_list_for(org_id=org_id, pool_ids={row.pool_id for row in usage})
    discount = BillingAccount.objects.filter(org_id=org_id).values_list(
        "discount_bps", flat=True).first() or 0
    return usage_cost_micros(usage=usage, prices=prices, discount_bps=discount)


def invoices_for_org(*, org: Organization) -> QuerySet[Invoice]:
    return (Invoice.objects.filter(org=org).select_related("supplements")
            .order_by("-period_start", "-revision"))


def invoice_with_lines(*, queryset: QuerySet[Invoice], invoice_id: int) -> Invoice | None:
    lines = InvoiceLine.objects.select_related("pool").order_by("position")
    return (queryset.select_related("org", "replaces", "supplements")
            .prefetch_related(Prefetch("lines", queryset=lines)).filter(pk=invoice_id).first())


def invoices_for_operator(*, org_id: int | None = None, status: str = "",
                          month: date | None = None) -> QuerySet[Invoice]:
    invoices = Invoice.objects.select_related("org")
    if org_id:
        invoices = invoices.filter(org_id=org_id)
    if status:
        invoices = invoices.filter(status=status)
    if month:
        invoices = invoices.filter(period_start=month)
    return invoices.order_by("-period_start", "org_id", "-revision")


def org_for_billing_reader(*, user, org_id: int) -> Organization | None:
    """The org if `user` (a user, or an admin key with its creator's role) may see its money;
    None otherwise (callers answer 404 either way)."""
    if isinstance(user, AdminKeyPrincipal):
        allowed = user.org_id == org_id and user.role in BILLING_READERS
        return user.key.org if allowed else None
    membership = (Membership.objects.select_related("org")
                  .filter(user=user, org_id=org_id, role__in=BILLING_READERS).first())
    return membership.org if membership else None


def outbox_dead_letters() -> QuerySet[OutboxMessage]:
    return (OutboxMessage.objects.filter(status=OutboxStatus.DEAD)
            .select_related("org", "invoice").order_by("-id"))


def usage_rows_for_export(*, org: Organization, start: datetime, end: datetime):
    """Per key and hour, streamed (iterator) for the CSV export."""
    return (UsageHourly.objects.filter(org=org, hour__gte=start, hour__lt=end)
            .select_related("pool", "api_key").order_by("hour", "pool_id", "api_key_id")
            .iterator(chunk_size=2000))


def accounts_in_dunning() -> QuerySet[BillingAccount]:
    """Orgs whose payment failed and whose grace period runs (or ran out: suspended)."""
    return (BillingAccount.objects.filter(grace_until__isnull=False).select_related("org")
            .order_by("grace_until"))


def stripe_events_failed() -> QuerySet[StripeEvent]:
    return StripeEvent.objects.filter(status=StripeEventStatus.FAILED).order_by("-received_at")


def billing_problem_counts() -> dict[str, int]:
    """For the console dashboard (three COUNT queries)."""
    return {
        "dunning": accounts_in_dunning().count(),
        "dead_letters": outbox_dead_letters().count(),
        "failed_events": stripe_events_failed().count(),
    }


def price_book() -> QuerySet[PriceVersion]:
    """Every version, public and negotiated, per pool in start order (the price book page)."""
    return PriceVersion.objects.select_related("pool", "org", "created_by").order_by(
        "pool_id", "org_id", "effective_from", "id")


def _usage_by_org(org_ids: set[int], now: datetime) -> dict[int, list[UsageRow]]:
    start, end = month_bounds(month_of(now))
    usage: dict[int, list[UsageRow]] = defaultdict(list)
    rows = (UsageHourly.objects.filter(org_id__in=org_ids, hour__gte=start,
                                       hour__lt=min(end, now))
            .values("org_id", "pool_id", "hour")
            .annotate(i=Sum("input_tokens"), o=Sum("output_tokens"),
                      pi=Sum("premium_input_tokens"), po=Sum("premium_output_tokens"),
                      ci=Sum("cached_input_tokens"))
            .order_by())
    for r in rows:
        usage[r["org_id"]].append(UsageRow(r["pool_id"], r["hour"], r["i"], r["o"], r["pi"],
                                           r["po"], r["ci"]))
    return usage


def _price_lists(org_ids: set[int], pool_ids: set[int]) -> tuple[list[Price], dict]:
    """The public versions of the pools, and each org's negotiated ones: one query."""
    versions = PriceVersion.objects.filter(Q(org__isnull=True) | Q(org_id__in=org_ids),
                                           pool_id__in=pool_ids)
    public, negotiated = [], defaultdict(list)
    for v in versions:
        (negotiated[v.org_id] if v.org_id else public).append(_price(v))
    return public, negotiated


def _month_to_date(usage: dict[int, list[UsageRow]], org_ids: set[int], public: list[Price],
                   negotiated: dict, now: datetime) -> dict[int, int]:
    """Usage and booking charges (less refunds) of the month so far, discounted."""
    discounts = dict(BillingAccount.objects.filter(org_id__in=org_ids)
                     .values_list("org_id", "discount_bps"))
    start, _ = month_bounds(month_of(now))
    # Up to and including `now`: a booking charged this very instant is spent.
    bookings = booking_lines_by_org(org_ids=org_ids, start=start,
                                    end=now + timedelta(microseconds=1))
    return {org_id: max(0, -(-sum(ln.amount_pico for ln in rate_usage(
                usage=usage.get(org_id, []), prices=public + negotiated[org_id],
                discount_bps=discounts.get(org_id, 0), bookings=bookings.get(org_id, [])))
                // PICO_PER_MICRO))
            for org_id in org_ids}


def payment_method_added_at(*, org: Organization) -> datetime | None:
    """When the org last finished adding a payment method (a setup-mode Checkout completed,
    as Stripe's verified webhook told us), or None. Read from the stored events: Stripe keeps
    the card, we keep no copy of it."""
    customer = (BillingAccount.objects.filter(org=org).values_list("stripe_customer_id", flat=True)
                .first())
    if not customer:
        return None
    return (StripeEvent.objects.filter(type="checkout.session.completed",
                                       payload__data__object__customer=customer,
                                       payload__data__object__mode="setup")
            .exclude(status=StripeEventStatus.FAILED).order_by("-received_at")
            .values_list("received_at", flat=True).first())
def month_to_date_micros_by_org(*, org_ids: set[int], now: datetime) -> dict[int, int]:
    """Month-to-date spend of several orgs (micro-dollars, rounded up like the live counter):
    three queries for all of them (usage, prices, discounts), then the same pure rating as the
    invoice, per org."""
    if not org_ids:
        return {}
    usage = _usage_by_org(org_ids, now)
    public, negotiated = _price_lists(org_ids, {u.pool_id for us in usage.values() for u in us})
    return _month_to_date(usage, org_ids, public, negotiated, now)


def _reservation_prices(org_ids: set[int], pool_ids: set[int], public: list[Price],
                        negotiated: dict, now: datetime) -> dict:
    hour = now.replace(minute=0, second=0, microsecond=0)
    result = {}
    for org_id in org_ids:
        prices = public + negotiated[org_id]
        for pool_id in pool_ids:
            starts = {hour} | {p.effective_from for p in prices
                               if p.pool_id == pool_id and p.effective_from
                               and p.effective_from > hour}
            applied = [price_for(pool_id=pool_id, hour=start, prices=prices) for start in starts]
            result[(org_id, pool_id)] = (max(p.input + p.premium_input for p in applied),
                                         max(p.output + p.premium_output for p in applied))
    return result


def capped_spend_micros(*, org_ids: set[int], pool_ids: set[int], now: datetime
                        ) -> tuple[dict[int, int], dict[tuple[int, int], tuple[int, int]]]:
    """For orgs with a spend cap, what the admission engine needs, in three queries (usage,
    prices, discounts): each org's month-to-date (micro-dollars, as
    `month_to_date_micros_by_org`), and per (org, pool) the (input, output) micro-dollars per
    million tokens, premium included, that authorize holds per reserved token: the worst case
    of the price in force now and of every price a version already created brings later (the
    engine keeps it until the next publish; cached input is never dearer than input)."""
    if not org_ids:
        return {}, {}
    usage = _usage_by_org(org_ids, now)
    public, negotiated = _price_lists(
        org_ids, set(pool_ids) | {u.pool_id for us in usage.values() for u in us})
    return (_month_to_date(usage, org_ids, public, negotiated, now),
            _reservation_prices(org_ids, set(pool_ids), public, negotiated, now))
