"""Booking capacity over REST (billing/bookings.py has the rules and the prices).

Org endpoints take the session or the org's admin key: owners, admins and billing members read
(and an admin key whose creator is one); owners and admins quote, book and cancel. Another
org's bookings answer 404. Operators read every booking and cancel any, with a reason."""

from datetime import UTC, timedelta

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from billing.bookings import (
    BOOKING_MANAGERS,
    BOOKING_READERS,
    REFUND_RULE,
    booking_quote,
)
from billing.services import booking_confirm
from orgs.auth import ADMIN_KEY_AUTHENTICATION, ADMIN_KEY_THROTTLES
from orgs.selectors import (
    operator_require,
    org_get_for_principal,
    org_require_role,
    principal_actor,
)
from quotas.bookings import (
    BOOKING_DAILY_TOKENS_MAX,
    BOOKING_HORIZON,
    BOOKING_TPS_MAX,
    BookingAsk,
    booking_cancel,
)
from quotas.ledger import (
    booking_get,
    org_booking_get,
    org_bookings,
    pool_bookings,
    pool_free_series,
)
from quotas.models import Booking, BookingState, CapacityPool
from quotas.selectors import allocations_in_force, pool_get
from sluice.api import validated_input
from sluice.errors import NotFound
from sluice.openapi import errors
from sluice.pagination import PaginatedApi, paginate


class BookingOutput(serializers.Serializer):
    id = serializers.IntegerField()
    org = serializers.IntegerField(source="org_id")
    pool = serializers.IntegerField(source="pool_id")
    starts_at = serializers.DateTimeField()
    ends_at = serializers.DateTimeField()
    output_tps = serializers.IntegerField(help_text="Guaranteed output tokens/s added to the "
                                          "allocation during the window.")
    input_tps = serializers.IntegerField(help_text="Guaranteed input tokens/s added (pools "
                                         "with a prefill capacity; else 0).")
    extra_daily_tokens = serializers.IntegerField(
        help_text="Added to the allocation's daily tokens while the window is in force.")
    state = serializers.SerializerMethodField(help_text="confirmed, active (in force), ended, "
                                              "cancelled: as the clock has it.")
    cost_micros = serializers.SerializerMethodField(help_text="Charged when confirmed.")
    refund_micros = serializers.SerializerMethodField(help_text="Null unless refunded.")
    created_at = serializers.DateTimeField()
    cancelled_at = serializers.DateTimeField(allow_null=True)
    cancelled_by = serializers.SerializerMethodField(
        help_text='"organization", "operator" (also a capacity change or the allocation '
        "ending), or null.")
    cancel_reason = serializers.CharField()

    def get_state(self, booking: Booking) -> str:
        return booking.phase_at(timezone.now())

    def get_cost_micros(self, booking: Booking) -> int | None:
        charge = getattr(booking, "charge", None)
        return charge.amount_micros if charge else None

    def get_refund_micros(self, booking: Booking) -> int | None:
        charge = getattr(booking, "charge", None)
        return charge.refund_micros if charge and charge.refunded_at else None

    def get_cancelled_by(self, booking: Booking) -> str | None:
        if booking.cancelled_at is None:
            return None
        return "operator" if booking.cancelled_by_operator else "organization"


class BookingInput(serializers.Serializer):
    pool = serializers.PrimaryKeyRelatedField(queryset=CapacityPool.objects.all())
    starts_at = serializers.DateTimeField(
        help_text="UTC, on the quarter hour, at least a minute and at most 60 days ahead.")
    ends_at = serializers.DateTimeField(help_text="UTC, on the quarter hour; 1 hour to 7 "
                                        "days after starts_at.")
    output_tps = serializers.IntegerField(min_value=1, max_value=BOOKING_TPS_MAX)
    input_tps = serializers.IntegerField(min_value=0, max_value=BOOKING_TPS_MAX, default=0)
    extra_daily_tokens = serializers.IntegerField(min_value=0,
                                                  max_value=BOOKING_DAILY_TOKENS_MAX, default=0)

    def ask(self) -> BookingAsk:
        data = self.validated_data
        return BookingAsk(starts_at=data["starts_at"].astimezone(UTC),
                          ends_at=data["ends_at"].astimezone(UTC),
                          output_tps=data["output_tps"], input_tps=data["input_tps"],
                          extra_daily_tokens=data["extra_daily_tokens"])


class BookingConfirmInput(BookingInput):
    quote_micros = serializers.IntegerField(
        min_value=0, required=False, help_text="The quote's amount: the booking is refused "
        "(409 `quote_changed`) if the price moved since.")


class QuoteOutput(serializers.Serializer):
    amount_micros = serializers.IntegerField()
    price_version = serializers.IntegerField(source="price_version_id", allow_null=True)
    output_micros_per_tps_hour = serializers.IntegerField(
        help_text="At the window's start; a version starting inside it prices its hours.")
    input_micros_per_tps_hour = serializers.IntegerField()
    hours = serializers.FloatField(source="ask.hours")
    fits = serializers.BooleanField(help_text="Whether the window has the room now.")
    free_tps = serializers.IntegerField(source="free.output_tps",
                                        help_text="Free at the window's busiest instant.")
    free_input_tps = serializers.IntegerField(source="free.input_tps", allow_null=True)
    refund_rule = serializers.SerializerMethodField()

    def get_refund_rule(self, quote) -> str:
        return REFUND_RULE


def _org(request, org_id: int, *, roles=BOOKING_READERS, perm="quotas.view_booking"):
    org = org_get_for_principal(user=request.user, org_id=org_id)
    org_require_role(user=request.user, org=org, roles=roles, perm=perm)
    return org


class OrgBookingListApi(PaginatedApi, APIView):
    authentication_classes = ADMIN_KEY_AUTHENTICATION
    throttle_classes = ADMIN_KEY_THROTTLES

    @extend_schema(responses=BookingOutput(many=True),
                   description="The org's bookings, latest window first.")
    def get(self, request, org_id: int):
        org = _org(request, org_id)
        return paginate(request, self, org_bookings(org=org).select_related("charge"),
                        BookingOutput)

    @extend_schema(
        request=BookingConfirmInput, responses={201: BookingOutput, **errors(409, 422)},
        description="Book: confirmed only if the window has the room at every instant, "
        "charged at once and counted against the month's spend cap. Refusals write nothing: "
        "400 `invalid_booking` (`details.problems`: in_past, misaligned, too_short, too_long, "
        "too_far_ahead, ...), 403 `no_allocation`, 422 `booking_exceeds_pool`, "
        "`allocation_ends_before_window`, `spend_cap_exceeded`, 409 `booking_no_room` (the "
        "window's free headroom in `details.free_tps`), `quote_changed`.")
    def post(self, request, org_id: int):
        org = _org(request, org_id, roles=BOOKING_MANAGERS, perm="quotas.add_booking")
        serializer = BookingConfirmInput(data=request.data)
        serializer.is_valid(raise_exception=True)
        booking = booking_confirm(org=org, pool=serializer.validated_data["pool"],
                                  ask=serializer.ask(), actor=principal_actor(request.user),
                                  quote_micros=serializer.validated_data.get("quote_micros"))
        return Response(BookingOutput(org_booking_get(org=org, booking_id=booking.pk)).data,
                        status=status.HTTP_201_CREATED)


class OrgBookingQuoteApi(APIView):
    authentication_classes = ADMIN_KEY_AUTHENTICATION
    throttle_classes = ADMIN_KEY_THROTTLES

    @extend_schema(request=BookingInput, responses={200: QuoteOutput, **errors(422)},
                   description="What booking the window would cost now, and whether it has "
                   "the room. Writes nothing. The same refusals as booking, except that a "
                   "window without room answers `fits: false` with its free headroom.")
    def post(self, request, org_id: int):
        org = _org(request, org_id, roles=BOOKING_MANAGERS, perm="quotas.add_booking")
        serializer = BookingInput(data=request.data)
        serializer.is_valid(raise_exception=True)
        quote = booking_quote(org=org, pool=serializer.validated_data["pool"],
                              ask=serializer.ask())
        return Response(QuoteOutput(quote).data)


class OrgBookingDetailApi(APIView):
    authentication_classes = ADMIN_KEY_AUTHENTICATION
    throttle_classes = ADMIN_KEY_THROTTLES

    @extend_schema(responses=BookingOutput)
    def get(self, request, org_id: int, booking_id: int):
        org = _org(request, org_id)
        return Response(BookingOutput(org_booking_get(org=org, booking_id=booking_id)).data)


class OrgBookingCancelApi(APIView):
    authentication_classes = ADMIN_KEY_AUTHENTICATION
    throttle_classes = ADMIN_KEY_THROTTLES

    @extend_schema(request=None, responses={200: BookingOutput, **errors(409)},
                   description="Cancel before the window starts (409 `booking_started` "
                   "after). " + REFUND_RULE)
    def post(self, request, org_id: int, booking_id: int):
        org = _org(request, org_id, roles=BOOKING_MANAGERS, perm="quotas.change_booking")
        booking = org_booking_get(org=org, booking_id=booking_id)
        booking_cancel(booking=booking, actor=principal_actor(request.user),
                       reason="cancelled by the organization")
        return Response(BookingOutput(org_booking_get(org=org, booking_id=booking_id)).data)


class AvailabilityOutput(serializers.Serializer):
    at = serializers.DateTimeField()
    free_tps = serializers.IntegerField(source="output_tps")
    free_input_tps = serializers.IntegerField(source="input_tps", allow_null=True)


class OrgPoolAvailabilityApi(APIView):
    authentication_classes = ADMIN_KEY_AUTHENTICATION
    throttle_classes = ADMIN_KEY_THROTTLES

    class FilterSerializer(serializers.Serializer):
        days = serializers.IntegerField(min_value=1, max_value=BOOKING_HORIZON.days,
                                        default=14)

    @extend_schema(parameters=[FilterSerializer], responses=AvailabilityOutput(many=True),
                   description="Per hour from the current one, the guaranteed tokens/s still "
                   "free to book at every instant of the hour. Pools the org holds an "
                   "allocation in (others: 404).")
    def get(self, request, org_id: int, pool_id: int):
        org = _org(request, org_id)
        pool = pool_get(pool_id=pool_id)
        if not allocations_in_force().filter(org=org, pool=pool).exists():
            raise NotFound("No such pool.")
        days = validated_input(self.FilterSerializer, request.query_params)["days"]
        start = timezone.now().replace(minute=0, second=0, microsecond=0)
        points = pool_free_series(pool=pool, start=start, end=start + timedelta(days=days),
                                  step=timedelta(hours=1))
        return Response(AvailabilityOutput(points, many=True).data)


class OperatorBookingListApi(PaginatedApi, APIView):
    class FilterSerializer(serializers.Serializer):
        pool = serializers.IntegerField(required=False)
        org = serializers.IntegerField(required=False)
        state = serializers.ChoiceField(choices=BookingState.choices, required=False)

    @extend_schema(parameters=[FilterSerializer], responses=BookingOutput(many=True),
                   description="Every booking, by window start.")
    def get(self, request):
        operator_require(user=request.user, perm="quotas.view_booking")
        filters = validated_input(self.FilterSerializer, request.query_params)
        bookings = pool_bookings(state=filters.get("state", "")).select_related("charge")
        if "pool" in filters:
            bookings = bookings.filter(pool_id=filters["pool"])
        if "org" in filters:
            bookings = bookings.filter(org_id=filters["org"])
        return paginate(request, self, bookings, BookingOutput)


class OperatorBookingCancelApi(APIView):
    class InputSerializer(serializers.Serializer):
        reason = serializers.CharField(max_length=500, help_text="Told to the org.")

    @extend_schema(request=InputSerializer, responses={200: BookingOutput, **errors(409)},
                   description="Cancel a booking whose window has not ended, also during it: "
                   "refunded in full, the org told by email and webhook.")
    def post(self, request, booking_id: int):
        operator_require(user=request.user, perm="quotas.change_booking")
        booking = booking_get(booking_id=booking_id)
        data = validated_input(self.InputSerializer, request.data)
        booking_cancel(booking=booking, actor=request.user, reason=data["reason"],
                       by_operator=True)
        return Response(BookingOutput(booking_get(booking_id=booking_id)).data)
