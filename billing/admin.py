"""Billing admin. Read-mostly: every change goes through the same services as the API."""

from django.contrib import admin

from billing import services
from billing.models import (
    BillingAccount,
    Invoice,
    InvoiceLine,
    OutboxMessage,
    OutboxStatus,
    PriceVersion,
    SpendAlert,
    StripeEvent,
)
from sluice.admin import AddOnlyAdminMixin, ReadOnlyAdminMixin, run_service_on_each


@admin.register(PriceVersion)
class PriceVersionAdmin(AddOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["pool", "org", "effective_from", "input_micros_per_mtok",
                    "output_micros_per_mtok", "premium_input_micros_per_mtok",
                    "premium_output_micros_per_mtok", "created_by"]
    list_filter = ["pool"]
    raw_id_fields = ["org"]
    fields = ["pool", "org", "effective_from", "input_micros_per_mtok",
              "cached_input_micros_per_mtok", "output_micros_per_mtok",
              "premium_input_micros_per_mtok", "premium_output_micros_per_mtok",
              "booking_output_micros_per_tps_hour", "booking_input_micros_per_tps_hour", "note"]

    def service_save(self, *, request, obj, data):
        return services.price_version_create.nested(
            **{f: data[f] for f in self.fields}, actor=request.user)


class InvoiceLineInline(admin.TabularInline):
    model = InvoiceLine
    fields = ["position", "description", "quantity_tokens", "unit_micros_per_mtok",
              "amount_cents"]
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Invoice)
class InvoiceAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["number", "org", "period_start", "status", "total_cents", "supplements",
                    "stripe_status", "payment_failed_at"]
    list_filter = ["status", "period_start"]
    search_fields = ["number", "org__name", "stripe_invoice_id"]
    list_select_related = ["org", "supplements"]
    show_full_result_count = False
    inlines = [InvoiceLineInline]
    actions = ["void", "reissue", "bill_late_usage"]

    @admin.action(description="Void selected invoices")
    def void(self, request, queryset):
        run_service_on_each(self, request, queryset, services.invoice_void, "Voided",
                            arg="invoice", reason="voided in admin")

    @admin.action(description="Void and re-issue selected invoices")
    def reissue(self, request, queryset):
        run_service_on_each(self, request, queryset, services.invoice_reissue, "Re-issued",
                            arg="invoice", reason="re-issued in admin")

    @admin.action(description="Bill late usage of the selected paid invoices' months")
    def bill_late_usage(self, request, queryset):
        run_service_on_each(self, request, queryset, services.invoice_bill_late_usage,
                            "Supplements of late usage issued",
                            arg="invoice", reason="billed in admin")


@admin.register(OutboxMessage)
class OutboxMessageAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["id", "kind", "org", "invoice", "status", "attempts", "next_attempt_at",
                    "last_error"]
    list_filter = ["status", "kind"]
    list_select_related = ["org", "invoice"]
    show_full_result_count = False
    actions = ["retry"]

    @admin.action(description="Retry selected dead letters")
    def retry(self, request, queryset):
        run_service_on_each(self, request, queryset.filter(status=OutboxStatus.DEAD),
                            services.outbox_retry, "Queued again", arg="message")


@admin.register(StripeEvent)
class StripeEventAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["event_id", "type", "status", "error", "received_at", "processed_at"]
    list_filter = ["status", "type"]
    search_fields = ["event_id"]
    show_full_result_count = False
    actions = ["reprocess"]

    @admin.action(description="Process selected failed events again")
    def reprocess(self, request, queryset):
        run_service_on_each(self, request, queryset, services.stripe_event_retry,
                            "Processed again", arg="event")


@admin.register(BillingAccount)
class BillingAccountAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["org", "stripe_customer_id", "spend_cap_micros", "discount_bps",
                    "grace_until"]
    search_fields = ["org__name", "stripe_customer_id"]
    list_select_related = ["org"]


@admin.register(SpendAlert)
class SpendAlertAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["org", "month", "threshold_pct", "cost_micros", "created_at"]
    list_filter = ["month", "threshold_pct"]
    list_select_related = ["org"]
