"""Org-facing billing API: owners and billing members of the org only. Anyone else, members of
other orgs included, gets the same 404 as for an org that does not exist."""

import csv
from datetime import date

from django.conf import settings
from django.http import HttpResponse, StreamingHttpResponse
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from billing import selectors, services, stripe_api
from billing.api.serializers import InvoiceDetailSerializer, InvoiceSerializer
from billing.pdf import interrupted_note, invoice_pdf
from billing.periods import month_bounds, month_of, month_parse
from billing.rating import total_cents
from billing.services.accounts import SPEND_CAP_MAX_MICROS
from sluice.api import validated_input
from sluice.errors import NotFound
from sluice.openapi import errors
from sluice.pagination import PaginatedApi, paginate


class OrgBillingView(APIView):
    def org(self, request, org_id: int):
        org = selectors.org_for_billing_reader(user=request.user, org_id=org_id)
        if org is None:
            raise NotFound("No such organization.")
        return org

    def invoice(self, request, org_id: int, invoice_id: int):
        org = self.org(request, org_id)
        invoice = selectors.invoice_with_lines(
            queryset=selectors.invoices_for_org(org=org), invoice_id=invoice_id)
        if invoice is None:
            raise NotFound("No such invoice.")
        return invoice


class BillingSummaryView(OrgBillingView):
    class BillingSummarySerializer(serializers.Serializer):
        month = serializers.DateField()
        cost_micros = serializers.IntegerField()
        cost_cents = serializers.IntegerField()
        spend_cap_micros = serializers.IntegerField()
        percent_of_cap = serializers.IntegerField()
        cap_reached = serializers.BooleanField()
        lines = serializers.ListField(child=serializers.DictField())

    @extend_schema(responses=BillingSummarySerializer)
    def get(self, request, org_id: int):
        """Month to date, rated by the same function as the monthly invoice."""
        org, now = self.org(request, org_id), timezone.now()
        status = services.spend_status(org=org, now=now)
        lines = selectors.month_rated_lines(org=org, month=month_of(now), until=now)
        return Response(self.BillingSummarySerializer({
            "month": status.month, "cost_micros": status.cost_micros,
            "cost_cents": total_cents(lines), "spend_cap_micros": status.cap_micros,
            "percent_of_cap": status.percent, "cap_reached": status.reached,
            "lines": [{"kind": ln.kind, "pool": ln.pool_id, "quantity_tokens": ln.quantity_tokens,
                       "amount_cents": ln.amount_cents} for ln in lines],
        }).data)


class InvoiceListView(PaginatedApi, OrgBillingView):
    @extend_schema(responses=InvoiceSerializer(many=True))
    def get(self, request, org_id: int):
        invoices = selectors.invoices_for_org(org=self.org(request, org_id)) \
            .select_related("replaces")
        return paginate(request, self, invoices, InvoiceSerializer)


class InvoiceDetailView(OrgBillingView):
    @extend_schema(responses=InvoiceDetailSerializer)
    def get(self, request, org_id: int, invoice_id: int):
        invoice = self.invoice(request, org_id, invoice_id)
        return Response(InvoiceDetailSerializer(invoice).data)


def invoice_html(invoice) -> str:
    return render_to_string("billing/invoice.html", {
        "invoice": invoice, "lines": invoice.lines.all(),
        "interrupted_note": interrupted_note(invoice)})


class InvoiceHtmlView(OrgBillingView):
    @extend_schema(responses={(200, "text/html"): str})
    def get(self, request, org_id: int, invoice_id: int):
        invoice = self.invoice(request, org_id, invoice_id)
        return HttpResponse(invoice_html(invoice), content_type="text/html; charset=utf-8")


class InvoicePdfView(OrgBillingView):
    @extend_schema(responses={(200, "application/pdf"): bytes})
    def get(self, request, org_id: int, invoice_id: int):
        invoice = self.invoice(request, org_id, invoice_id)
        response = HttpResponse(invoice_pdf(invoice), content_type="application/pdf")
        response["Content-Disposition"] = f'attachment; filename="{invoice.number}.pdf"'
        return response


class _Echo:
    def write(self, value):
        return value


# `hours`: 1, or 24 for a day whose hours were compacted into one row (metering/retention.py).
CSV_HEADER = ["hour_utc", "pool", "api_key", "requests", "errors", "input_tokens",
              "output_tokens", "premium_input_tokens", "premium_output_tokens", "hours"]


def usage_csv_response(*, org, month: date, filename: str) -> StreamingHttpResponse:
    start, end = month_bounds(month)
    return usage_csv_stream(org=org, start=start, end=end, filename=filename)


def usage_csv_stream(*, org, start, end, filename: str) -> StreamingHttpResponse:
    """Hourly usage per key in [start, end), streamed: a month (or the portal's chosen range)
    of hourly rows per key can be large."""
    writer = csv.writer(_Echo())

    def rows():
        yield writer.writerow(CSV_HEADER)
        for r in selectors.usage_rows_for_export(org=org, start=start, end=end):
            yield writer.writerow([
                r.hour.isoformat(), str(r.pool), r.api_key.display_prefix if r.api_key else "",
                r.requests, r.errors, r.input_tokens, r.output_tokens,
                r.premium_input_tokens, r.premium_output_tokens, r.hours])

    response = StreamingHttpResponse(rows(), content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


class InvoiceUsageCsvView(OrgBillingView):
    @extend_schema(responses={(200, "text/csv"): str})
    def get(self, request, org_id: int, invoice_id: int):
        invoice = self.invoice(request, org_id, invoice_id)
        return usage_csv_response(org=invoice.org, month=invoice.period_start,
                                  filename=f"{invoice.number}-usage.csv")


class UsageCsvView(OrgBillingView):
    @extend_schema(responses={(200, "text/csv"): str})
    def get(self, request, org_id: int):
        """?month=YYYY-MM (default: this month)."""
        org = self.org(request, org_id)
        try:
            month = month_parse(request.query_params.get("month", "")) \
                if request.query_params.get("month") else month_of(timezone.now())
        except ValueError:
            raise serializers.ValidationError({"month": ["Use YYYY-MM."]}) from None
        return usage_csv_response(org=org, month=month,
                                  filename=f"{org.slug}-{month:%Y-%m}-usage.csv")


class SpendCapView(OrgBillingView):
    class SpendCapInputSerializer(serializers.Serializer):
        spend_cap_micros = serializers.IntegerField(min_value=0, max_value=SPEND_CAP_MAX_MICROS)
        alert_thresholds = serializers.ListField(
            child=serializers.IntegerField(min_value=1, max_value=100), min_length=1,
            max_length=10, required=False)

    class SpendCapSerializer(serializers.Serializer):
        spend_cap_micros = serializers.IntegerField()
        alert_thresholds = serializers.ListField(child=serializers.IntegerField())

    @extend_schema(responses=SpendCapSerializer)
    def get(self, request, org_id: int):
        account = selectors.billing_account_or_default(org=self.org(request, org_id))
        return Response(self.SpendCapSerializer(account).data)

    @extend_schema(request=SpendCapInputSerializer, responses=SpendCapSerializer)
    def put(self, request, org_id: int):
        org = self.org(request, org_id)
        data = validated_input(self.SpendCapInputSerializer, request.data)
        current = selectors.billing_account_or_default(org=org)
        account = services.spend_cap_set(
            org=org, cap_micros=data["spend_cap_micros"],
            thresholds=data.get("alert_thresholds", current.alert_thresholds),
            actor=request.user)
        return Response(self.SpendCapSerializer(account).data)


class PaymentMethodSessionView(OrgBillingView):
    class PaymentMethodSessionSerializer(serializers.Serializer):
        url = serializers.URLField()

    @extend_schema(request=None, responses={200: PaymentMethodSessionSerializer,
                                            **errors(502)})
    def post(self, request, org_id: int):
        """A Stripe Checkout link (setup mode) to add or replace the payment method."""
        org = self.org(request, org_id)
        customer_id = services.stripe_customer_ensure(org=org)
        back = settings.PUBLIC_URL + reverse("portal:billing", kwargs={"slug": org.slug})
        url = stripe_api.setup_session_create(customer_id=customer_id,
                                              success_url=f"{back}?setup=done",
                                              cancel_url=back)
        return Response({"url": url})
