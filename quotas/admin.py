from django.contrib import admin

from quotas import (
    admin_gateway_tokens,  # noqa: F401 - registers its ModelAdmin
    services,
)
from quotas.models import Allocation, CapacityPool
from quotas.selectors import pool_capacity_summary
from sluice.admin import ServiceAdminMixin, run_service_on_each


@admin.register(CapacityPool)
class CapacityPoolAdmin(ServiceAdminMixin, admin.ModelAdmin):
    list_display = ["__str__", "capacity_tps", "prefill_capacity_tps", "guaranteeable_ratio",
                    "guaranteed", "limiter_failure_policy"]
    readonly_fields = ["summary"]
    exclude = ["queue_max_wait_ms"]  # set on the console's pool settings

    @admin.display(description="Guaranteed / guaranteeable TPS")
    def guaranteed(self, pool):
        summary = pool_capacity_summary(pool=pool)
        return f"{summary.guaranteed_tps:,} / {summary.guaranteeable_tps:,}"

    @admin.display(description="Capacity summary")
    def summary(self, pool):
        s = pool_capacity_summary(pool=pool)
        return (f"{s.guaranteed_tps:,} of {s.guaranteeable_tps:,} guaranteeable TPS promised "
                f"to {s.org_count} orgs; {s.free_tps:,} free")

    def get_readonly_fields(self, request, obj=None):
        return ["model", "region", "tier", "summary"] if obj else []

    def get_form(self, request, obj=None, **kwargs):
        form = super().get_form(request, obj, **kwargs)
        # Left empty, the output estimate default and floor stay as they are (or as defaulted).
        for name in ("output_estimate_default", "output_estimate_floor", "lease_ttl_seconds"):
            if name in form.base_fields:
                form.base_fields[name].required = False
        return form

    def service_save(self, *, request, obj, data):
        estimates = {k: data.get(k) for k in ("output_estimate_default", "output_estimate_floor",
                                              "lease_ttl_seconds")}
        if obj is not None:
            return services.pool_settings_set.nested(
                pool=obj, actor=request.user, capacity_tps=data["capacity_tps"],
                guaranteeable_ratio=data["guaranteeable_ratio"],
                prefill_capacity_tps=data.get("prefill_capacity_tps"),
                limiter_failure_policy=data["limiter_failure_policy"],
                speed_floor_output_tps=data["speed_floor_output_tps"],
                ttft_ceiling_ms=data["ttft_ceiling_ms"], **estimates)
        return services.pool_create.nested(
            actor=request.user, model=data["model"], region=data["region"], tier=data["tier"],
            capacity_tps=data["capacity_tps"], guaranteeable_ratio=data["guaranteeable_ratio"],
            prefill_capacity_tps=data.get("prefill_capacity_tps"),
            limiter_failure_policy=data["limiter_failure_policy"], **estimates)


@admin.register(Allocation)
class AllocationAdmin(ServiceAdminMixin, admin.ModelAdmin):
    list_display = ["org", "pool", "guaranteed_tps", "burst_tps", "daily_tokens",
                    "max_concurrency", "status", "valid_until"]
    list_filter = ["status", "pool"]
    search_fields = ["org__name"]
    raw_id_fields = ["org"]
    list_select_related = ["org", "pool"]
    show_full_result_count = False
    actions = ["end"]

    LIMITS = ("guaranteed_tps", "burst_tps", "guaranteed_input_tps", "burst_input_tps",
              "daily_tokens", "max_concurrency", "valid_until")

    def get_fields(self, request, obj=None):
        return ["org", "pool", *self.LIMITS] if obj is None else ["org", "pool", "status",
                                                                  *self.LIMITS]

    def get_readonly_fields(self, request, obj=None):
        return ["org", "pool", "status"] if obj else []

    def service_save(self, *, request, obj, data):
        # Input TPS left empty: derived from the output TPS where the pool meters input apart.
        limits = {k: data.get(k) for k in self.LIMITS}
        if obj is not None:
            return services.allocation_change.nested(allocation=obj, actor=request.user,
                                                     **limits)
        return services.allocation_grant.nested(org=data["org"], pool=data["pool"],
                                                actor=request.user, **limits)

    @admin.action(description="End selected allocations", permissions=["change"])
    def end(self, request, queryset):
        run_service_on_each(self, request, queryset, services.allocation_end, "Ended",
                            arg="allocation")
