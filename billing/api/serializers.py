from rest_framework import serializers

from billing.models import Invoice, InvoiceLine, OutboxMessage, PriceVersion, StripeEvent


class InvoiceLineSerializer(serializers.ModelSerializer):
    class Meta:
        model = InvoiceLine
        fields = ["position", "kind", "pool", "price_version", "description", "quantity_tokens",
                  "unit_micros_per_mtok", "amount_cents"]


class InvoiceSerializer(serializers.ModelSerializer):
    replaces = serializers.SlugRelatedField(
        slug_field="number", read_only=True, allow_null=True,
        help_text="The number of the invoice this re-issue replaces; else null.")
    supplements = serializers.SlugRelatedField(
        slug_field="number", read_only=True, allow_null=True,
        help_text="A supplement's paid invoice, whose month's late usage it bills; else null.")

    class Meta:
        model = Invoice
        fields = ["id", "org", "number", "period_start", "period_end", "revision", "status",
                  "currency", "total_cents", "issued_at", "paid_at", "payment_failed_at",
                  "voided_at", "void_reason", "replaces", "supplements", "stripe_status"]


class InvoiceDetailSerializer(InvoiceSerializer):
    lines = InvoiceLineSerializer(many=True, read_only=True)

    class Meta(InvoiceSerializer.Meta):
        fields = [*InvoiceSerializer.Meta.fields, "lines"]


class OperatorInvoiceSerializer(InvoiceSerializer):
    class Meta(InvoiceSerializer.Meta):
        fields = [*InvoiceSerializer.Meta.fields, "stripe_invoice_id"]


class OutboxMessageSerializer(serializers.ModelSerializer):
    invoice_number = serializers.CharField(source="invoice.number", default=None,
                                           allow_null=True,
                                           help_text="null: a message about no invoice "
                                                     "(creating the Stripe customer).")

    class Meta:
        model = OutboxMessage
        fields = ["id", "kind", "org", "invoice", "invoice_number", "status", "attempts",
                  "next_attempt_at", "last_error", "created_at", "done_at"]


class StripeEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = StripeEvent
        fields = ["id", "event_id", "type", "status", "error", "received_at", "processed_at"]


class PriceVersionSerializer(serializers.ModelSerializer):
    class Meta:
        model = PriceVersion
        fields = ["id", "pool", "org", "effective_from", "input_micros_per_mtok",
                  "cached_input_micros_per_mtok", "output_micros_per_mtok",
                  "premium_input_micros_per_mtok",
                  "premium_output_micros_per_mtok", "booking_output_micros_per_tps_hour",
                  "booking_input_micros_per_tps_hour", "note", "created_at"]
