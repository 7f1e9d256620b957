"""The operator console: Django's admin site, reachable only by staff who passed TOTP.

It is the project's default admin site (console.apps.ConsoleAdminConfig), so every ModelAdmin
registered with `admin.site` or `@admin.register` appears here; the console's own pages
(dashboard, org page, pools, audit search) are added by `get_urls` and wrapped by `admin_view`,
which sends anyone without `has_permission` (staff + verified second factor) to the login.
"""

from django.contrib import admin
from django.contrib.auth.views import LogoutView
from django.urls import path, reverse
from django_otp.admin import OTPAdminSite


class ConsoleSite(OTPAdminSite):
    site_header = "Sluice console"
    site_title = "Sluice console"
    index_title = "Dashboard"

    def __init__(self, name: str = "admin"):
        # Named "admin" so `admin:` URL names (ModelAdmin pages, login, logout) keep working.
        super().__init__(name)

    def login(self, request, extra_context=None):
        from console.views.auth import console_login

        return console_login(request, site=self)

    def logout(self, request, extra_context=None):
        # Back to the console's sign-in, not the portal's (LOGOUT_REDIRECT_URL).
        return LogoutView.as_view(next_page=reverse("admin:login"))(request)

    def index(self, request, extra_context=None):
        from console.views.pages import dashboard

        return dashboard(request, site=self)

    def get_urls(self):
        from console.views import auth, bookings, gateway_tokens, money, pages, rollout

        def page(view):
            return self.admin_view(lambda request, **kw: view(request, site=self, **kw))

        return [
            path("2fa/enroll/", auth.totp_enroll, name="totp_enroll"),
            path("console/orgs/", page(pages.org_list), name="console_orgs"),
            path("console/orgs/<int:org_id>/", page(pages.org_detail), name="console_org"),
            path("console/orgs/<int:org_id>/lifecycle/", page(pages.org_lifecycle),
                 name="console_org_lifecycle"),
            path("console/orgs/<int:org_id>/allocations/grant/", page(pages.allocation_grant),
                 name="console_allocation_grant"),
            path("console/allocations/<int:allocation_id>/", page(pages.allocation_edit),
                 name="console_allocation"),
            path("console/allocations/<int:allocation_id>/end/", page(pages.allocation_end_view),
                 name="console_allocation_end"),
            path("console/pools/", page(pages.pool_list), name="console_pools"),
            path("console/pools/<int:pool_id>/capacity/", page(pages.pool_capacity),
                 name="console_pool_capacity"),
            path("console/pools/<int:pool_id>/settings/", page(pages.pool_settings),
                 name="console_pool_settings"),
            path("console/pools/<int:pool_id>/admission/", page(pages.pool_admission),
                 name="console_pool_admission"),
            path("console/pools/<int:pool_id>/calendar/", page(bookings.pool_calendar),
                 name="console_pool_calendar"),
            path("console/pools/<int:pool_id>/calendar/capacity/",
                 page(bookings.pool_calendar_capacity), name="console_pool_calendar_capacity"),
            path("console/pools/<int:pool_id>/capacity/conflicts/",
                 page(bookings.capacity_conflicts_preview),
                 name="console_pool_capacity_conflicts"),
            path("console/bookings/", page(bookings.booking_list), name="console_bookings"),
            path("console/bookings/<int:booking_id>/cancel/", page(bookings.booking_cancel_view),
                 name="console_booking_cancel"),
            path("console/audit/", page(pages.audit_search), name="console_audit"),
            path("console/applications/", page(rollout.vetting_queue_page),
                 name="console_vetting"),
            path("console/applications/bulk/", page(rollout.vetting_bulk),
                 name="console_vetting_bulk"),
            path("console/applications/<int:application_id>/", page(rollout.application_page),
                 name="console_application"),
            path("console/applications/<int:application_id>/<slug:op>/",
                 page(rollout.application_op), name="console_application_op"),
            path("console/waves/", page(rollout.wave_list), name="console_waves"),
            path("console/waves/new/", page(rollout.wave_create_view), name="console_wave_create"),
            path("console/waves/<int:wave_id>/", page(rollout.wave_page), name="console_wave"),
            path("console/waves/<int:wave_id>/open/", page(rollout.wave_open_view),
                 name="console_wave_open"),
            path("console/waves/<int:wave_id>/close/", page(rollout.wave_close_view),
                 name="console_wave_close"),
            path("console/quota-requests/", page(rollout.quota_inbox),
                 name="console_quota_requests"),
            path("console/quota-requests/<int:request_id>/<slug:decision>/",
                 page(rollout.quota_request_decide), name="console_quota_request_decide"),
            path("console/prices/", page(money.price_book_page), name="console_prices"),
            path("console/prices/new/", page(money.price_version_add),
                 name="console_price_add"),
            path("console/invoices/<int:invoice_id>/", page(money.invoice_page),
                 name="console_invoice"),
            path("console/gateway-tokens/", page(gateway_tokens.gateway_tokens),
                 name="console_gateway_tokens"),
            path("console/gateway-tokens/new/", page(gateway_tokens.gateway_token_add),
                 name="console_gateway_token_add"),
            path("console/gateway-tokens/<int:token_id>/revoke/",
                 page(gateway_tokens.gateway_token_revoke_view),
                 name="console_gateway_token_revoke"),
            path("console/billing/", page(money.billing_problems),
                 name="console_billing_problems"),
            path("console/billing/outbox/<int:message_id>/retry/",
                 page(money.outbox_retry_view), name="console_outbox_retry"),
            path("console/billing/stripe-events/<int:event_id>/reprocess/",
                 page(money.stripe_event_reprocess), name="console_stripe_event_reprocess"),
            *super().get_urls(),
        ]


# The one console instance: Django's lazy default site, built from ConsoleSite on first use.
console_site = admin.site
