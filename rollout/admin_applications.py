"""Admin for waitlist applications. Every change goes through rollout.applications: rows are
read-only here, and the actions (assign to me, approve, reject, override the score) ask for a
reason on an intermediate page, then call the same services as the REST API.

Registered on import; rollout/admin.py imports this module.
"""

from django import forms
from django.contrib import admin, messages
from django.db import transaction
from django.template.response import TemplateResponse
from django.utils.html import format_html, format_html_join

from rollout.applications import (
    application_reviewer_assign,
    application_score_override,
    applications_decide_bulk,
)
from rollout.models import Application, ApplicationCheck, ApplicationNote, Decision
from rollout.waitlist import application_rows
from sluice.admin import ReadOnlyAdminMixin, run_service_on_each
from sluice.errors import DomainError


class DecisionForm(forms.Form):
    reason = forms.CharField(widget=forms.Textarea, help_text="Internal: kept in the audit log.")
    shared_reason = forms.CharField(widget=forms.Textarea, required=False,
                                    help_text="Shown to the organization (rejection email).")


class ScoreOverrideForm(forms.Form):
    score = forms.IntegerField(required=False, min_value=-1_000, max_value=1_000,
                               help_text="Empty: go back to the computed score.")
    reason = forms.CharField(widget=forms.Textarea)


class CheckInline(admin.TabularInline):
    model = ApplicationCheck
    extra = 0
    can_delete = False
    fields = readonly_fields = ["item", "done", "done_by_label", "done_at", "note"]

    def has_add_permission(self, request, obj=None):
        return False


class NoteInline(admin.TabularInline):
    model = ApplicationNote
    extra = 0
    can_delete = False
    fields = readonly_fields = ["created_at", "author", "body"]

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Application)
class ApplicationAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Organizations apply; operators do not apply for them."""

    list_display = ["id", "org", "state", "use_case", "latency_sensitivity",
                    "expected_peak_tps", "preferred_region", "submitted_at", "reviewer",
                    "score_override"]
    list_filter = ["state", "use_case", "latency_sensitivity", "org__pool_preference__pool"]
    search_fields = ["org__name", "legal_name", "contact_email"]
    list_select_related = ["org", "reviewer"]
    date_hierarchy = "submitted_at"
    inlines = [CheckInline, NoteInline]
    actions = ["assign_to_me", "approve", "reject", "override_score"]

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in Application._meta.fields] + ["score_breakdown"]

    @admin.display(description="Priority score (rollout/scoring.py)")
    def score_breakdown(self, obj):
        app = application_rows([Application.objects.select_related(
            "org__pool_preference__pool").get(pk=obj.pk)])[0]
        rows = app.score.as_dict().items()
        table = format_html_join("", "<tr><th>{}</th><td>{}</td></tr>", rows)
        return format_html("<p>Position: {}</p><table>{}</table>",
                           app.position or "—", table)

    def _run(self, request, queryset, call) -> None:
        try:
            call()
        except DomainError as exc:
            self.message_user(request, f"{exc.message} {exc.details or ''}", messages.ERROR)
        else:
            self.message_user(request, f"Done for {queryset.count()} application(s).")

    @admin.action(description="Assign to me (starts the review)")
    def assign_to_me(self, request, queryset):
        run_service_on_each(self, request, queryset, application_reviewer_assign, "Assigned",
                            arg="application", reviewer=request.user)

    def _with_form(self, request, queryset, form_class, title, apply):
        """Django's intermediate-page pattern: show the form, then apply on its POST."""
        form = form_class(request.POST if "apply" in request.POST else None)
        if form.is_valid():
            self._run(request, queryset, lambda: apply(form.cleaned_data))
            return None
        return TemplateResponse(request, "admin/waitlist_action_form.html", {
            **self.admin_site.each_context(request), "title": title, "form": form,
            "queryset": queryset, "action": request.POST["action"],
            "opts": self.model._meta,
            "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
        })

    def _decide(self, request, queryset, decision, title):
        ids = list(queryset.values_list("pk", flat=True))
        return self._with_form(request, queryset, DecisionForm, title, lambda data: (
            applications_decide_bulk(application_ids=ids, decision=decision,
                                     actor=request.user, **data)))

    @admin.action(description="Approve (all or none, with a reason)")
    def approve(self, request, queryset):
        return self._decide(request, queryset, Decision.APPROVE, "Approve applications")

    @admin.action(description="Reject (all or none, with a reason)")
    def reject(self, request, queryset):
        return self._decide(request, queryset, Decision.REJECT, "Reject applications")

    @admin.action(description="Override the priority score")
    def override_score(self, request, queryset):
        def apply(data):
            with transaction.atomic():  # one reason, all the selected, or none
                for app in queryset:
                    application_score_override.nested(application=app, actor=request.user,
                                                      **data)
        return self._with_form(request, queryset, ScoreOverrideForm, "Override the score", apply)
