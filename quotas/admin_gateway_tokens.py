"""Admin for gateway tokens. quotas/admin.py and QuotasConfig.ready() import this module (its
registrations run once, at import). Creating a token shows the secret once, in the body of the
page that answers the POST: never in a Django message (the cookie that carries messages is
signed, not encrypted), a redirect's URL or a log."""

from django.contrib import admin
from django.template.response import TemplateResponse
from django.utils.cache import add_never_cache_headers

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
        token.plaintext = plaintext  # on this instance only, for response_add
        return token

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        obj.plaintext = form.service_result.plaintext

    def response_add(self, request, obj, post_url_continue=None):
        # Not Django's redirect with a message: the page itself shows the secret, once.
        response = TemplateResponse(request, "admin/quotas/gatewaytoken/created.html", {
            **self.admin_site.each_context(request), "opts": self.opts, "token": obj,
            "secret": obj.plaintext, "title": f"Gateway token for {obj.name}"}, status=201)
        add_never_cache_headers(response)  # no browser or proxy keeps a copy
        return response

    @admin.action(description="Revoke selected gateway tokens", permissions=["change"])
    def revoke(self, request, queryset):
        run_service_on_each(self, request, queryset, gateway_token_revoke, "Revoked",
                            arg="token")
