"""Admin for gateway tokens. The lead's quotas/admin.py imports this module (its registrations
run once, at import). Creating a token shows the secret once, in a message."""

from django.contrib import admin, messages

from quotas.gateway.tokens import gateway_token_create, gateway_token_revoke
from quotas.models import GatewayToken
from sluice.errors import DomainError


@admin.register(GatewayToken)
class GatewayTokenAdmin(admin.ModelAdmin):
    list_display = ["name", "prefix", "created_at", "last_used_at", "revoked_at"]
    list_filter = [("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["name", "lookup"]
    fields = ["name"]
    actions = ["revoke"]

    @admin.display(description="Prefix")
    def prefix(self, obj: GatewayToken) -> str:
        return f"gw_{obj.lookup}"

    def has_change_permission(self, request, obj=None) -> bool:
        return obj is None and super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # revoke instead: usage history keeps its gateway

    def save_model(self, request, obj, form, change):
        token, plaintext = gateway_token_create(name=obj.name, actor=request.user)
        obj.pk, obj.lookup, obj.digest = token.pk, token.lookup, token.digest
        messages.warning(request, f"Gateway token for {token.name}: {plaintext} "
                                  "(shown once; copy it now).")

    @admin.action(description="Revoke selected gateway tokens", permissions=["change"])
    def revoke(self, request, queryset):
        for token in queryset:
            try:
                gateway_token_revoke(token=token, actor=request.user)
            except DomainError as exc:
                messages.error(request, f"{token.name}: {exc.message}")
            else:
                messages.success(request, f"Revoked {token.name}.")
