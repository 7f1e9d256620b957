from django.contrib import admin

from rollout import (  # noqa: F401 - register their ModelAdmins
    admin_applications,
    admin_waves,
)
from rollout.models import QuotaRequest
from rollout.quota_requests import quota_request_approve
from sluice.admin import ReadOnlyAdminMixin, run_service_on_each


@admin.register(QuotaRequest)
class QuotaRequestAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Organizations ask from the portal or the API; operators decide with the action."""

    list_display = ["org", "pool", "guaranteed_tps", "burst_tps", "daily_tokens", "status",
                    "created_at", "decided_by"]
    list_filter = ["status", "pool"]
    search_fields = ["org__name", "reason"]
    list_select_related = ["org", "pool"]
    readonly_fields = [f.name for f in QuotaRequest._meta.fields]
    show_full_result_count = False
    actions = ["approve"]

    @admin.action(description="Approve selected requests (capacity checked)",
                  permissions=["change"])
    def approve(self, request, queryset):
        run_service_on_each(self, request, queryset, quota_request_approve, "Approved",
                            arg="request")
