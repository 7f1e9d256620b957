"""The hook's paths in Django's URLconf, for its OpenAPI description only: authorize (quotas)
and usage (metering) are answered on the event loop before Django (config/asgi.py)."""

from django.urls import path

from quotas.hook import schema

urlpatterns = [
    path("authorize", schema.schema_only(schema.AuthorizeSchema), name="authorize"),
    path("authorize/batch", schema.schema_only(schema.AuthorizeBatchSchema),
         name="authorize_batch"),
    path("usage", schema.schema_only(schema.UsageSchema), name="usage"),
]
