"""Admin for gateway tokens. quotas/admin.py and QuotasConfig.ready() import this module (its
registrations run once, at import). Creating a token shows the secret once, in a message."""

from django.contrib import admin, messages

from quotas.hook.gateway_tokens import gateway_token_create, gateway_token_revoke
from quotas.models import GatewayToken
from sluice.admin import AddOnlyAdminMixin, run_service_on_each


@admin.register(GatewayToken)
class GatewayTokenAdmin(AddOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["name", "prefix", "created_at", "last_used_at", "revoked_at"]
    list_filter = [("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["name", "lookup"]
    fields = ["name"]
    actions = ["revoke"]

    @admin.display(description="Prefix")
    def prefix(self, obj: GatewayToken) -> str:
        return f"gw_{obj.lookup}"

    def service_save(self, *, request, obj, data):
        token, plaintext = gateway_token_create.nested(name=data["name"], actor=request.user)
        messages.warning(request, f"Gateway token for {token.name}: {plaintext} "
                                  "(shown once; copy it now).")
        return token

    @admin.action(description="Revoke selected gateway tokens", permissions=["change"])
    def revoke(self, request, queryset):
        run_service_on_each(self, request, queryset, gateway_token_revoke, "Revoked",
                            arg="token")
