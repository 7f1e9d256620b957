"""Operator billing API: invoices (void, re-issue, close, bill late usage), the price book,
outbox dead letters and failed Stripe events, each with its retry action."""

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from billing import selectors, services
from billing.api.serializers import (
    InvoiceDetailSerializer,
    OperatorInvoiceSerializer,
    OutboxMessageSerializer,
    PriceVersionSerializer,
    StripeEventSerializer,
)
from billing.models import Invoice, InvoiceStatus, OutboxMessage, PriceVersion, StripeEvent
from billing.periods import month_parse
from billing.rating import (
    LIST_BOOKING_INPUT_MICROS_PER_TPS_HOUR,
    LIST_BOOKING_OUTPUT_MICROS_PER_TPS_HOUR,
)
from orgs.models import Organization
from orgs.permissions import operator_access
from quotas.models import CapacityPool
from sluice.api import validated_input
from sluice.errors import NotFound
from sluice.openapi import errors
from sluice.pagination import PaginatedApi, paginate


class OperatorView(PaginatedApi, APIView):
    permission_classes = [operator_access("billing.change_invoice")]

    def paginated(self, request, queryset, serializer_class):
        return paginate(request, self, queryset, serializer_class)


class MonthField(serializers.CharField):
    def to_internal_value(self, data):
        try:
            return month_parse(str(data))
        except ValueError:
            raise serializers.ValidationError("Use YYYY-MM.") from None


class OperatorInvoiceListView(OperatorView):
    class InvoiceFilterSerializer(serializers.Serializer):
        org = serializers.IntegerField(required=False)
        status = serializers.ChoiceField(choices=InvoiceStatus.choices, required=False)
        month = MonthField(required=False)

    @extend_schema(parameters=[InvoiceFilterSerializer],
                   responses=OperatorInvoiceSerializer(many=True))
    def get(self, request):
        f = validated_input(self.InvoiceFilterSerializer, request.query_params)
        invoices = selectors.invoices_for_operator(
            org_id=f.get("org"), status=f.get("status", ""), month=f.get("month")
        ).select_related("replaces", "supplements")
        return self.paginated(request, invoices, OperatorInvoiceSerializer)


class OperatorInvoiceDetailView(OperatorView):
    @extend_schema(responses=InvoiceDetailSerializer)
    def get(self, request, invoice_id: int):
        invoice = selectors.invoice_with_lines(queryset=Invoice.objects.all(),
                                               invoice_id=invoice_id)
        if invoice is None:
            raise NotFound("No such invoice.")
        return Response(InvoiceDetailSerializer(invoice).data)


class ReasonSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=200)


class OperatorInvoiceVoidView(OperatorView):
    @extend_schema(request=ReasonSerializer, responses={200: OperatorInvoiceSerializer,
                                                        **errors(409)})
    def post(self, request, invoice_id: int):
        data = validated_input(ReasonSerializer, request.data)
        invoice = services.invoice_void(invoice=get_object_or_404(Invoice, pk=invoice_id),
                                        actor=request.user, reason=data["reason"])
        return Response(OperatorInvoiceSerializer(invoice).data)


class OperatorInvoiceReissueView(OperatorView):
    @extend_schema(request=ReasonSerializer, responses={201: OperatorInvoiceSerializer,
                                                        **errors(409)})
    def post(self, request, invoice_id: int):
        data = validated_input(ReasonSerializer, request.data)
        invoice = services.invoice_reissue(
            invoice=get_object_or_404(Invoice, pk=invoice_id), actor=request.user,
            reason=data["reason"])
        return Response(OperatorInvoiceSerializer(invoice).data, status=201)


class OperatorInvoiceLateUsageView(OperatorView):
    @extend_schema(request=ReasonSerializer, responses={201: OperatorInvoiceSerializer,
                                                        **errors(409, 422)})
    def post(self, request, invoice_id: int):
        """Bill the usage of a paid invoice's month reported after it was issued, on a
        supplementary invoice (409 if the month's invoice is open: re-issue it; 422
        `no_late_usage` if there is nothing to bill)."""
        data = validated_input(ReasonSerializer, request.data)
        invoice = services.invoice_bill_late_usage(
            invoice=get_object_or_404(Invoice, pk=invoice_id), actor=request.user,
            reason=data["reason"])
        return Response(OperatorInvoiceSerializer(invoice).data, status=201)


class OperatorInvoiceCloseView(OperatorView):
    class InvoiceCloseInputSerializer(serializers.Serializer):
        org = serializers.PrimaryKeyRelatedField(queryset=Organization.objects.all())
        month = MonthField()

    @extend_schema(request=InvoiceCloseInputSerializer,
                   responses={200: OperatorInvoiceSerializer, 201: OperatorInvoiceSerializer,
                              **errors(409)})
    def post(self, request):
        """Close one org's month now (the beat does every org on the 1st). Idempotent."""
        data = validated_input(self.InvoiceCloseInputSerializer, request.data)
        invoice, created = services.invoice_close_month(
            org=data["org"], month=data["month"],
            actor=request.user)
        return Response(OperatorInvoiceSerializer(invoice).data, status=201 if created else 200)


class OperatorDeadLetterListView(OperatorView):
    @extend_schema(responses=OutboxMessageSerializer(many=True))
    def get(self, request):
        return self.paginated(request, selectors.outbox_dead_letters(), OutboxMessageSerializer)


class OperatorOutboxRetryView(OperatorView):
    @extend_schema(request=None, responses={200: OutboxMessageSerializer, **errors(409)})
    def post(self, request, message_id: int):
        message = services.outbox_retry(
            message=get_object_or_404(OutboxMessage, pk=message_id), actor=request.user)
        return Response(OutboxMessageSerializer(message).data)


class OperatorStripeEventListView(OperatorView):
    @extend_schema(responses=StripeEventSerializer(many=True))
    def get(self, request):
        events = StripeEvent.objects.order_by("-received_at")
        if request.query_params.get("status"):
            events = events.filter(status=request.query_params["status"])
        return self.paginated(request, events, StripeEventSerializer)


class OperatorStripeEventRetryView(OperatorView):
    @extend_schema(request=None, responses={200: StripeEventSerializer, **errors(409)})
    def post(self, request, event_pk: int):
        event = get_object_or_404(StripeEvent, pk=event_pk)
        services.stripe_event_retry(event=event, actor=request.user)
        event.refresh_from_db()
        return Response(StripeEventSerializer(event).data)


class OperatorPriceListView(OperatorView):
    class PriceVersionInputSerializer(serializers.Serializer):
        pool = serializers.PrimaryKeyRelatedField(queryset=CapacityPool.objects.all())
        org = serializers.PrimaryKeyRelatedField(queryset=Organization.objects.all(),
                                                 required=False, allow_null=True)
        effective_from = serializers.DateTimeField()
        input_micros_per_mtok = serializers.IntegerField(min_value=0)
        cached_input_micros_per_mtok = serializers.IntegerField(
            min_value=0, required=False, allow_null=True,
            help_text="Input tokens served from the upstream's prompt cache; absent or null: "
                      "the input price.")
        output_micros_per_mtok = serializers.IntegerField(min_value=0)
        premium_input_micros_per_mtok = serializers.IntegerField(min_value=0, default=0)
        premium_output_micros_per_mtok = serializers.IntegerField(min_value=0, default=0)
        booking_output_micros_per_tps_hour = serializers.IntegerField(
            min_value=0, default=LIST_BOOKING_OUTPUT_MICROS_PER_TPS_HOUR,
            help_text="Booked capacity: micro-dollars per output token/s and hour of a "
                      "booking's window.")
        booking_input_micros_per_tps_hour = serializers.IntegerField(
            min_value=0, default=LIST_BOOKING_INPUT_MICROS_PER_TPS_HOUR,
            help_text="Per input token/s and hour (pools with a prefill capacity).")
        note = serializers.CharField(max_length=200, required=False, default="")

    @extend_schema(responses=PriceVersionSerializer(many=True))
    def get(self, request):
        versions = PriceVersion.objects.order_by("pool_id", "org_id", "-effective_from")
        return self.paginated(request, versions, PriceVersionSerializer)

    @extend_schema(request=PriceVersionInputSerializer,
                   responses={201: PriceVersionSerializer, **errors(409, 422)})
    def post(self, request):
        data = validated_input(self.PriceVersionInputSerializer, request.data)
        version = services.price_version_create(**data, actor=request.user)
        return Response(PriceVersionSerializer(version).data, status=201)
