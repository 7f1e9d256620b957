"""Admin for rollout waves and per-pool auto-admission. Creating a wave, opening, closing and
switching auto-admission call quotas.waves services; a wave's plan is shown on its page.

Registered on import; quotas/admin.py imports this module.
"""

from django import forms
from django.contrib import admin, messages
from django.utils.html import format_html, format_html_join

from quotas.models import PoolAdmission, RolloutWave, WaveState
from quotas.waves import (
    WAVE_FIELDS,
    pool_auto_admit_set,
    wave_close,
    wave_create,
    wave_open,
    wave_plan,
    wave_validate,
)
from sluice.errors import DomainError


class RolloutWaveForm(forms.ModelForm):
    class Meta:
        model = RolloutWave
        fields = ["pool", *WAVE_FIELDS]

    def clean(self):
        data = super().clean()
        if self.errors or self.instance.pk:
            return data
        try:
            wave_validate(pool=data["pool"], values={f: data.get(f) for f in WAVE_FIELDS})
        except DomainError as exc:
            for field, errors in exc.fields.items():
                self.add_error(field, errors)
        return data


@admin.register(RolloutWave)
class RolloutWaveAdmin(admin.ModelAdmin):
    list_display = ["name", "pool", "opens_at", "state", "capacity_tps", "max_orgs",
                    "guaranteed_tps", "admitted_count"]
    list_filter = ["state", "pool"]
    list_select_related = ["pool"]
    date_hierarchy = "opens_at"
    actions = ["open_now", "close"]
    form = RolloutWaveForm
    fields = ["pool", *WAVE_FIELDS]

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return []
        # A wave is not edited once created: close (cancel) it and create another.
        return ["pool", *WAVE_FIELDS, "state", "opened_at", "closed_at", "admitted_count",
                "plan"]

    def get_fields(self, request, obj=None):
        if obj is None:
            return self.fields
        return [*self.fields, "state", "opened_at", "closed_at", "admitted_count", "plan"]

    def has_delete_permission(self, request, obj=None):
        return False

    def save_model(self, request, obj, form, change):
        # Only reached on add (every field is read-only on change).
        created = wave_create(actor=request.user, pool=obj.pool,
                              **{f: getattr(obj, f) for f in WAVE_FIELDS})
        obj.pk = created.pk

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

    def _each(self, request, queryset, call, verb):
        for wave in queryset:
            try:
                call(wave)
            except DomainError as exc:
                self.message_user(request, f"{wave}: {exc.message}", messages.ERROR)
            else:
                self.message_user(request, f"{wave}: {verb}.")

    @admin.action(description="Open now (adds capacity, admits the queue)")
    def open_now(self, request, queryset):
        self._each(request, queryset, lambda w: wave_open(wave=w, actor=request.user), "opened")

    @admin.action(description="Close (or cancel if still scheduled)")
    def close(self, request, queryset):
        self._each(request, queryset, lambda w: wave_close(wave=w, actor=request.user,
                                                           reason="closed in admin"), "closed")


@admin.register(PoolAdmission)
class PoolAdmissionAdmin(admin.ModelAdmin):
    list_display = ["pool", "auto_admit", "updated_at"]
    list_select_related = ["pool"]
    fields = ["pool", "auto_admit"]

    def get_readonly_fields(self, request, obj=None):
        return ["pool"] if obj else []

    def has_delete_permission(self, request, obj=None):
        return False

    def save_model(self, request, obj, form, change):
        pool_auto_admit_set(pool=obj.pool, enabled=obj.auto_admit, actor=request.user)
