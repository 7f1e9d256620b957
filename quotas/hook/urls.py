from django.urls import path

from quotas.hook import schema, views

app_name = "hook"

urlpatterns = [
    path("authorize", schema.documented_by(schema.AuthorizeSchema)(views.authorize),
         name="authorize"),
    path("usage", schema.documented_by(schema.UsageSchema)(views.usage), name="usage"),
]
