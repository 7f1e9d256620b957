from django.contrib import admin
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView, TemplateView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from billing.api.views_costs import OrganizationCostsApi
from billing.api.webhook import stripe_webhook
from metering.api import leases as lease_urls
from metering.api.usage_completions import OrganizationUsageCompletionsApi
from quotas.hook import urls as hook_urls
from quotas.hook.metrics import metrics_view
from sluice.health import healthz, readyz

urlpatterns = [
    path("", TemplateView.as_view(template_name="landing.html"), name="landing"),
    # Browsers ask for /favicon.ico whatever the pages say; the file is a static one.
    path("favicon.ico", RedirectView.as_view(url=static("favicon.ico"), permanent=True)),
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    path("admin/", admin.site.urls),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("api/v1/", include("orgs.api.urls")),
    path("api/v1/", include("quotas.api.urls")),
    path("api/v1/", include("metering.api.urls")),
    # The hook gateways call, for its OpenAPI description: config/asgi.py serves it.
    path("api/gateway/v1/", include(([*hook_urls.urlpatterns, *lease_urls.urlpatterns],
                                     "hook"))),
    path("metrics", metrics_view, name="metrics"),
    path("api/v1/", include("rollout.api.urls")),
    path("api/v1/", include("billing.api.urls")),
    # OpenAI's organization paths, for tools that take a base URL and an admin key.
    path("v1/organization/usage/completions",
         OrganizationUsageCompletionsApi.as_view(), name="organization-usage-completions"),
    path("v1/organization/costs", OrganizationCostsApi.as_view(), name="organization-costs"),
    path("api/billing/stripe/webhook", stripe_webhook, name="stripe-webhook"),
    path("portal/", include("portal.urls")),
]

# Under /api/ these answer the one JSON error shape; elsewhere Django's pages.
handler400 = "sluice.error_responses.bad_request"
handler403 = "sluice.error_responses.permission_denied"
handler404 = "sluice.error_responses.page_not_found"
handler500 = "sluice.error_responses.server_error"
