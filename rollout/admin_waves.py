"""Admin for rollout waves and per-pool auto-admission. Creating a wave, opening, closing and
switching auto-admission call rollout.waves services; a wave's plan is shown on its page.

Registered on import; rollout/admin.py imports this module.
"""

from django.contrib import admin
from django.utils.html import format_html, format_html_join

from rollout.models import PoolAdmission, RolloutWave, WaveState
from rollout.waves import (
    WAVE_FIELDS,
    pool_auto_admit_set,
    wave_close,
    wave_create,
    wave_open,
    wave_plan,
)
from sluice.admin import AddOnlyAdminMixin, ServiceAdminMixin, run_service_on_each


@admin.register(RolloutWave)
class RolloutWaveAdmin(AddOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["name", "pool", "opens_at", "state", "capacity_tps", "max_orgs",
                    "guaranteed_tps", "admitted_count"]
    list_filter = ["state", "pool"]
    list_select_related = ["pool"]
    date_hierarchy = "opens_at"
    actions = ["open_now", "close"]
    fields = ["pool", *WAVE_FIELDS]

    def get_fields(self, request, obj=None):
        # Never edited once created (AddOnlyAdminMixin): close (cancel) it and create another.
        if obj is None:
            return self.fields
        return [*self.fields, "state", "opened_at", "closed_at", "admitted_count", "plan"]

    def service_save(self, *, request, obj, data):
        return wave_create.nested(actor=request.user, pool=data["pool"],
                                  **{f: data[f] for f in WAVE_FIELDS})

    @admin.display(description="Plan if opened now")
    def plan(self, obj):
        if obj.state != WaveState.SCHEDULED:
            return "—"
        p = wave_plan(wave=obj)
        admitted = format_html_join(", ", "{} ({})", (
            (e.application.org.name, e.breakdown.score) for e in p.admitted)) or "nobody"
        # format_html escapes its arguments into strings: format the numbers first.
        return format_html(
            "<p>Admits {} org(s): {}</p><p>Guaranteed {} of {} guaranteeable TPS ({}); "
            "projected peak {} of {} TPS ({}). Left: {} TPS free, {} org(s) queued asking "
            "{} TPS.</p>",
            len(p.admitted), admitted, p.guaranteed_tps_after, p.guaranteeable_tps_after,
            f"{p.guaranteed_utilization:.0%}", f"{p.projected_tps:.0f}", p.capacity_tps_after,
            f"{p.projected_utilization:.0%}", p.free_tps_after, p.queued_after,
            p.queued_after_expected_tps)

    @admin.action(description="Open now (adds capacity, admits the queue)")
    def open_now(self, request, queryset):
        run_service_on_each(self, request, queryset, wave_open, "Opened", arg="wave")

    @admin.action(description="Close (or cancel if still scheduled)")
    def close(self, request, queryset):
        run_service_on_each(self, request, queryset, wave_close, "Closed", arg="wave",
                            reason="closed in admin")


@admin.register(PoolAdmission)
class PoolAdmissionAdmin(ServiceAdminMixin, admin.ModelAdmin):
    list_display = ["pool", "auto_admit", "updated_at"]
    list_select_related = ["pool"]
    fields = ["pool", "auto_admit"]

    def get_readonly_fields(self, request, obj=None):
        return ["pool"] if obj else []

    def service_save(self, *, request, obj, data):
        return pool_auto_admit_set.nested(pool=obj.pool if obj else data["pool"],
                                          enabled=data["auto_admit"], actor=request.user)
