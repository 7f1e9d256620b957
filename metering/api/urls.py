from django.urls import path

from metering.api import usage_completions

urlpatterns = [
    path("orgs/<int:org_id>/usage/completions", usage_completions.UsageCompletionsApi.as_view(),
         name="api-org-usage-completions"),
]
