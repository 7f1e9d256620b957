"""The org-scoped portal pages. Each view gets the caller's membership from `org_page`, reads
through portal.selectors and changes state only through the orgs services."""

from datetime import UTC, datetime, time

from django.contrib import messages
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from metering.selectors import usage_tokens_by_pool
from orgs.models import (
    KEY_LIMIT_MANAGERS,
    KEY_MANAGERS,
    MEMBER_MANAGERS,
    OWNER_MANAGERS,
    OrgStatus,
    Role,
)
from orgs.selectors import (
    org_api_key_get,
    org_api_keys,
    org_invitation_get,
    org_members,
    org_membership_get,
)
from orgs.services import (
    KeySlice,
    api_key_create,
    api_key_limits_set,
    api_key_revoke,
    invitation_create,
    invitation_revoke,
    membership_remove,
    membership_role_change,
    org_queue_default_set,
)
from portal.access import flash_result, org_page
from portal.forms import (
    ApiKeyCreateForm,
    ApiKeyLimitsForm,
    InviteForm,
    OrgQueueDefaultForm,
    RoleForm,
)
from portal.progress import org_admitted, org_progress
from portal.selectors import org_invitations_pending, user_email_verified
from portal.views.application import EDITABLE_STATES
from quotas.ledger import org_booked_at
from quotas.selectors import org_allocations
from sluice.errors import DomainError
from sluice.forms import form_add_domain_error
from sluice.messages import flash, redirect_at


@org_page(page="status")
def status(request, membership):
    org = membership.org
    progress = org_progress(org=org)
    application = progress["application"]
    return render(request, "portal/status.html", {
        "org": org, "progress": progress, "application": application,
        "can_apply": membership.role in MEMBER_MANAGERS and _may_apply(org, application),
        "can_update": (membership.role in MEMBER_MANAGERS and application is not None
                       and application.state in EDITABLE_STATES),
        "email_verified": user_email_verified(user=request.user),
    })


def _may_apply(org, application) -> bool:
    """A new org without an application, or a rejected one (the cooling-off is checked when
    the form is sent, and its message shown there)."""
    return org.status == OrgStatus.REJECTED or (
        org.status == OrgStatus.APPLIED and application is None)


@org_page(page="members", roles=MEMBER_MANAGERS)
def members(request, membership):
    return _members_page(request, membership, invite_form=InviteForm(
        may_grant_owner=membership.role in OWNER_MANAGERS))


def _members_page(request, membership, *, invite_form, status_code=200):
    org = membership.org
    manages_owners = membership.role in OWNER_MANAGERS
    return render(request, "portal/members.html", {
        "org": org, "members": org_members(org=org).order_by("user__email"),
        "invitations": org_invitations_pending(org=org),
        "invite_form": invite_form, "manages_owners": manages_owners,
        "roles": [c for c in Role.choices if manages_owners or c[0] != Role.OWNER],
    }, status=status_code)


@require_POST
@org_page(page="members", roles=MEMBER_MANAGERS)
def member_invite(request, membership):
    form = InviteForm(request.POST, may_grant_owner=membership.role in OWNER_MANAGERS)
    if not form.is_valid():
        return _members_page(request, membership, invite_form=form, status_code=400)
    email, role = form.cleaned_data["email"], form.cleaned_data["role"]
    flash_result(request, lambda: invitation_create(org=membership.org, email=email, role=role,
                                                     actor=request.user),
                 f"Invitation sent to {email}.", at="invite")
    return redirect_at("portal:members", membership.org.slug, at="invite")


@require_POST
@org_page(page="members", roles=MEMBER_MANAGERS)
def member_role(request, membership, membership_id: int):
    target = org_membership_get(org=membership.org, membership_id=membership_id)
    form = RoleForm(request.POST)
    if form.is_valid():
        role = form.cleaned_data["role"]
        flash_result(request, lambda: membership_role_change(membership=target, role=role,
                                                              actor=request.user),
                     f"{target.user.email} is now {Role(role).label.lower()}.", at="members")
    else:
        flash(request, messages.ERROR, "Choose a valid role.", at="members")
    return redirect_at("portal:members", membership.org.slug, at="members")


@require_POST
@org_page(page="members", roles=MEMBER_MANAGERS)
def member_remove(request, membership, membership_id: int):
    target = org_membership_get(org=membership.org, membership_id=membership_id)
    removed = flash_result(request, lambda: membership_remove(membership=target,
                                                              actor=request.user),
                           f"{target.user.email} was removed.", at="members")
    if removed and target.pk == membership.pk:
        # Left the org: its members page is no longer ours to see.
        return redirect("portal:home")
    # Refused (the last owner stays) or someone else removed: the answer shows in the list.
    return redirect_at("portal:members", membership.org.slug, at="members")


@require_POST
@org_page(page="members", roles=MEMBER_MANAGERS)
def invitation_revoke_view(request, membership, invitation_id: int):
    invitation = org_invitation_get(org=membership.org, invitation_id=invitation_id)
    flash_result(request, lambda: invitation_revoke(invitation=invitation, actor=request.user),
                 f"The invitation of {invitation.email} was revoked.", at="invite")
    return redirect_at("portal:members", membership.org.slug, at="invite")


@org_page(page="keys")
def keys(request, membership):
    return render(request, "portal/keys.html", _keys_context(request, membership))


def _keys_context(request, membership, **extra) -> dict:
    org = membership.org
    return {"org": org, "keys": org_api_keys(org=org), "form": ApiKeyCreateForm(),
            "email_verified": user_email_verified(user=request.user),
            "queue_form": OrgQueueDefaultForm(initial={
                "queue_threshold_default_ms": org.queue_threshold_default_ms}), **extra}


@require_POST
@org_page(page="keys", roles=KEY_LIMIT_MANAGERS)
def org_queue_default(request, membership):
    """The org's default wait for capacity (owners, admins)."""
    form = OrgQueueDefaultForm(request.POST)
    status_code = 400
    if form.is_valid():
        try:
            org_queue_default_set(org=membership.org, actor=request.user,
                                  ms=form.cleaned_data["queue_threshold_default_ms"])
        except DomainError as error:
            form_add_domain_error(form=form, error=error)
            status_code = error.status
        else:
            flash(request, messages.SUCCESS, "The default wait for capacity was saved.",
                  at="queue-default")
            return redirect_at("portal:keys", membership.org.slug, at="queue-default")
    return render(request, "portal/keys.html",
                  _keys_context(request, membership, queue_form=form), status=status_code)


@never_cache  # the answer to a POST may carry a secret: no cache keeps it
@require_POST
@org_page(page="keys", roles=KEY_MANAGERS)
def key_create(request, membership):
    """Answers with the page (or, for htmx, the fragment) that shows the secret. It is rendered
    into this one response and never stored, so reloading cannot show it again."""
    form = ApiKeyCreateForm(request.POST)
    context, status_code = {"form": form}, 400
    if form.is_valid():
        try:
            key, secret = api_key_create(org=membership.org, name=form.cleaned_data["name"],
                                         actor=request.user)
        except DomainError as error:
            context["error"] = error.message
            status_code = error.status
        else:
            context = {"new_key": key, "secret": secret, "form": ApiKeyCreateForm()}
            status_code = 201
    if request.headers.get("HX-Request"):
        # The fragment also replaces the key list out of band, so the new key is listed.
        return render(request, "portal/_key_created.html", {
            "org": membership.org, "keys": org_api_keys(org=membership.org), "oob": True,
            "can_manage_keys": True, **context}, status=status_code)
    return render(request, "portal/keys.html", _keys_context(request, membership, **context),
                  status=status_code)


@require_POST
@org_page(page="keys", roles=KEY_MANAGERS)
def key_revoke(request, membership, key_id: int):
    key = org_api_key_get(org=membership.org, key_id=key_id)
    error = None
    try:
        key = api_key_revoke(key=key, actor=request.user)
    except DomainError as failure:
        error = failure.message
    if request.headers.get("HX-Request"):
        # htmx swaps just this key's row; a flash message would surface on a later page.
        return render(request, "portal/_key_row.html",
                      {"org": membership.org, "key": key, "error": error,
                       "can_manage_keys": True})
    if error:
        messages.error(request, error)
    else:
        messages.success(request, f"The key {key.name} was revoked.")
    return redirect("portal:keys", membership.org.slug)


@org_page(page="keys", roles=KEY_LIMIT_MANAGERS)
def key_limits(request, membership, key_id: int):
    """A key's own slice of the org's limits and its default service tier (owners, admins)."""
    key = org_api_key_get(org=membership.org, key_id=key_id)
    current = {"slice_output_tps": key.slice_output_tps, "slice_input_tps": key.slice_input_tps,
               "slice_daily_tokens": key.slice_daily_tokens,
               "slice_max_concurrency": key.slice_max_concurrency,
               "default_service_tier": key.default_service_tier,
               "queue_threshold_default_ms": key.queue_threshold_default_ms}
    form = ApiKeyLimitsForm(request.POST if request.method == "POST" else None, initial=current)
    status_code = 200
    if request.method == "POST":
        status_code = 400
        if form.is_valid():
            data = form.cleaned_data
            try:
                api_key_limits_set(
                    key=key, actor=request.user,
                    default_service_tier=data["default_service_tier"],
                    queue_threshold_default_ms=data["queue_threshold_default_ms"],
                    key_slice=KeySlice(output_tps=data["slice_output_tps"],
                                       input_tps=data["slice_input_tps"],
                                       daily_tokens=data["slice_daily_tokens"],
                                       max_concurrency=data["slice_max_concurrency"]))
            except DomainError as error:
                form_add_domain_error(form=form, error=error)
                status_code = error.status
            else:
                flash(request, messages.SUCCESS, f"The limits of {key.name} were saved.",
                      at=f"key-{key.pk}")
                return redirect_at("portal:keys", membership.org.slug, at=f"key-{key.pk}")
    return render(request, "portal/key_limits.html", {
        "org": membership.org, "key": key, "form": form,
        "allocations": org_allocations(org=membership.org)}, status=status_code)


@org_page(page="quotas")
def quotas(request, membership):
    org = membership.org
    if not org_admitted(org=org):
        return render(request, "portal/quotas.html", {"org": org,
                                                      "progress": org_progress(org=org)})
    now = timezone.now()
    used = usage_tokens_by_pool(org=org, since=datetime.combine(now.date(), time.min, tzinfo=UTC))
    # Bookings in force now: the limiter enforces them on top of the allocation.
    booked = org_booked_at(org_id=org.pk, at=now)
    return render(request, "portal/quotas.html", {
        "org": org, "admitted": True, "allocations": [
            {"allocation": a, "booked": booked.get(a.pool_id),
             "used_today": used.get(a.pool_id, 0),
             "left_today": max(a.daily_tokens - used.get(a.pool_id, 0), 0),
             "used_share": used.get(a.pool_id, 0) / a.daily_tokens}
            for a in org_allocations(org=org)],
    })
