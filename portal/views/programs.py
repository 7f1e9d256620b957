"""The pages that let an organization drive Sluice from its own programs: admin keys (for the
Usage, Costs and API key endpoints) and webhook endpoints with their deliveries. Owners and
admins only; secrets are rendered into the one response that creates them, never again."""

from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from orgs.models import MEMBER_MANAGERS
from orgs.selectors import org_admin_key_get, org_admin_keys
from orgs.services import admin_key_create, admin_key_revoke
from portal.access import flash_result, org_page
from portal.forms import AdminKeyCreateForm, WebhookEndpointForm
from sluice.errors import DomainError
from webhooks.selectors import (
    RECENT_DELIVERIES,
    endpoint_deliveries,
    org_webhook_delivery_get,
    org_webhook_endpoint_get,
    org_webhook_endpoints,
)
from webhooks.services import (
    webhook_delivery_resend,
    webhook_endpoint_create,
    webhook_endpoint_disable,
)


@never_cache  # the answer to a POST may carry a secret: no cache keeps it
@org_page(page="admin_keys", roles=MEMBER_MANAGERS)
def admin_keys(request, membership):
    org, form, context, status = membership.org, AdminKeyCreateForm(), {}, 200
    if request.method == "POST":
        form, status = AdminKeyCreateForm(request.POST), 400
        if form.is_valid():
            try:
                key, secret = admin_key_create(org=org, name=form.cleaned_data["name"],
                                               actor=request.user)
            except DomainError as error:
                context["error"], status = error.message, error.status
            else:
                form, status = AdminKeyCreateForm(), 201
                context = {"new_key": key, "secret": secret}
    return render(request, "portal/admin_keys.html", {
        "org": org, "form": form, "keys": org_admin_keys(org=org), **context}, status=status)


@require_POST
@org_page(page="admin_keys", roles=MEMBER_MANAGERS)
def admin_key_revoke_view(request, membership, key_id: int):
    key = org_admin_key_get(org=membership.org, key_id=key_id)
    flash_result(request, lambda: admin_key_revoke(key=key, actor=request.user),
                 f"The admin key {key.name} was revoked.")
    return redirect("portal:admin_keys", membership.org.slug)


@never_cache  # the answer to a POST may carry a secret: no cache keeps it
@org_page(page="webhooks", roles=MEMBER_MANAGERS)
def webhooks(request, membership):
    org, form, context, status = membership.org, WebhookEndpointForm(), {}, 200
    if request.method == "POST":
        form, status = WebhookEndpointForm(request.POST), 400
        if form.is_valid():
            try:
                endpoint, secret = webhook_endpoint_create(org=org, actor=request.user,
                                                           **form.cleaned_data)
            except DomainError as error:
                for field, problems in (error.fields or {}).items():
                    form.add_error(field if field in form.fields else None, problems)
                if not error.fields:
                    context["error"] = error.message
                status = error.status
            else:
                form, status = WebhookEndpointForm(), 201
                context = {"new_endpoint": endpoint, "secret": secret}
    return render(request, "portal/webhooks.html", {
        "org": org, "form": form, "endpoints": org_webhook_endpoints(org=org), **context},
        status=status)


@org_page(page="webhooks", roles=MEMBER_MANAGERS)
def webhook_endpoint(request, membership, endpoint_id: int):
    endpoint = org_webhook_endpoint_get(org=membership.org, endpoint_id=endpoint_id)
    return render(request, "portal/webhook_endpoint.html", {
        "org": membership.org, "endpoint": endpoint,
        "deliveries": endpoint_deliveries(endpoint=endpoint)[:RECENT_DELIVERIES]})


@require_POST
@org_page(page="webhooks", roles=MEMBER_MANAGERS)
def webhook_endpoint_disable_view(request, membership, endpoint_id: int):
    endpoint = org_webhook_endpoint_get(org=membership.org, endpoint_id=endpoint_id)
    flash_result(request, lambda: webhook_endpoint_disable(endpoint=endpoint,
                                                           actor=request.user),
                 f"The endpoint {endpoint.url} is disabled.")
    return redirect("portal:webhooks", membership.org.slug)


@require_POST
@org_page(page="webhooks", roles=MEMBER_MANAGERS)
def webhook_delivery_resend_view(request, membership, delivery_id: int):
    delivery = org_webhook_delivery_get(org=membership.org, delivery_id=delivery_id)
    flash_result(request, lambda: webhook_delivery_resend(delivery=delivery,
                                                          actor=request.user),
                 "The delivery is queued again.")
    return redirect("portal:webhook_endpoint", membership.org.slug, delivery.endpoint_id)
