"""Operator admin for the orgs domain. Every change goes through a service; list views stay
usable at 100k rows (no full counts on big tables, raw-id widgets, indexed ordering)."""

from django.contrib import admin

from orgs import services
from orgs.models import ApiKey, AuditEvent, Invitation, Membership, OperatorToken, Organization
from sluice.admin import ReadOnlyAdminMixin, ServiceAdminMixin, run_service_on_each


def transition_action(service, verb: str):
    def action(modeladmin, request, queryset):
        run_service_on_each(modeladmin, request, queryset, service, verb, arg="org")

    action.__name__ = f"action_{service.__name__}"
    action.short_description = f"{verb} selected organizations"
    action.allowed_permissions = ("change",)
    return action


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    raw_id_fields = ["user"]
    can_delete = False
    readonly_fields = ["user", "role", "created_at"]

    def has_add_permission(self, request, obj=None):
        return False


class ApiKeyInline(admin.TabularInline):
    model = ApiKey
    extra = 0
    fields = ["name", "lookup", "created_at", "expires_at", "revoked_at", "last_used_at"]
    readonly_fields = fields
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Organization)
class OrganizationAdmin(ServiceAdminMixin, admin.ModelAdmin):
    list_display = ["name", "slug", "status", "suspension_reason", "status_changed_at"]
    list_filter = ["status"]
    search_fields = ["name", "slug"]
    readonly_fields = ["status", "suspension_reason", "status_changed_at", "created_at",
                       "updated_at"]
    show_full_result_count = False
    inlines = [MembershipInline, ApiKeyInline]
    actions = [
        transition_action(services.org_review_start, "Review started for"),
        transition_action(services.org_approve, "Approved"),
        transition_action(services.org_reject, "Rejected"),
        transition_action(services.org_admit, "Admitted"),
        transition_action(services.org_suspend, "Suspended"),
        transition_action(services.org_restore, "Restored"),
        transition_action(services.org_offboard, "Offboarded"),
    ]

    def service_save(self, *, request, obj, data):
        if obj is not None:
            return services.org_rename.nested(org=obj, name=data["name"], actor=request.user)
        return services.org_create.nested(name=data["name"], slug=data.get("slug", ""),
                                          actor=request.user)

    def get_fields(self, request, obj=None):
        return ["name", "slug", *self.readonly_fields] if obj else ["name", "slug"]

    def get_inlines(self, request, obj):
        return self.inlines if obj else []

    def get_readonly_fields(self, request, obj=None):
        # Status moves only through the lifecycle actions; the slug is fixed once chosen.
        return ["slug", *self.readonly_fields] if obj else []


@admin.register(Membership)
class MembershipAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Members change through the API/portal, whose services keep an owner."""

    list_display = ["user", "org", "role", "created_at"]
    list_filter = ["role"]
    search_fields = ["user__email", "org__name"]
    raw_id_fields = ["user", "org"]
    list_select_related = ["user", "org"]
    show_full_result_count = False


@admin.register(Invitation)
class InvitationAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["email", "org", "role", "created_at", "expires_at", "accepted_at",
                    "revoked_at"]
    search_fields = ["email", "org__name"]
    list_select_related = ["org"]
    readonly_fields = [f.name for f in Invitation._meta.fields]
    show_full_result_count = False

    @admin.action(description="Revoke selected invitations", permissions=["change"])
    def revoke(self, request, queryset):
        run_service_on_each(self, request, queryset, services.invitation_revoke, "Revoked",
                            arg="invitation")

    actions = ["revoke"]


@admin.register(ApiKey)
class ApiKeyAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Keys are created by org members, who see the secret once."""

    list_display = ["name", "display_prefix", "org", "created_at", "expires_at", "revoked_at",
                    "last_used_at"]
    list_filter = [("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["name", "lookup", "org__name"]
    list_select_related = ["org"]
    readonly_fields = ["org", "name", "lookup", "created_by", "created_at", "expires_at",
                       "revoked_at", "last_used_at"]
    exclude = ["digest"]
    show_full_result_count = False

    @admin.action(description="Revoke selected API keys", permissions=["change"])
    def revoke(self, request, queryset):
        run_service_on_each(self, request, queryset, services.api_key_revoke, "Revoked", arg="key")

    actions = ["revoke"]


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["created_at", "actor_label", "org", "action", "target_type", "target_id"]
    list_filter = ["action", "target_type"]
    search_fields = ["action", "actor_label", "target_id", "org__name", "reason"]
    list_select_related = ["org"]
    date_hierarchy = "created_at"
    show_full_result_count = False
    readonly_fields = [f.name for f in AuditEvent._meta.fields]


@admin.register(OperatorToken)
class OperatorTokenAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Tokens are created with `manage.py operator_token_create`, shown once."""

    list_display = ["name", "user", "lookup", "created_at", "revoked_at", "last_used_at"]
    readonly_fields = ["user", "name", "lookup", "created_at", "revoked_at", "last_used_at"]
    exclude = ["digest"]

    @admin.action(description="Revoke selected tokens", permissions=["change"])
    def revoke(self, request, queryset):
        run_service_on_each(self, request, queryset, services.operator_token_revoke, "Revoked",
                            arg="token")

    actions = ["revoke"]

