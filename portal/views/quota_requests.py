"""Asking for more quota: the request form (owners and admins, as in the REST API), the org's
requests with their status and the operator's reason, and cancelling a pending one."""

from django.contrib import messages
from django.shortcuts import render
from django.views.decorators.http import require_POST

from orgs.models import MEMBER_MANAGERS, OrgStatus
from portal.access import flash_result, org_page
from portal.forms import QuotaRequestForm
from portal.progress import org_admitted, org_progress
from quotas.selectors import org_allocations
from rollout.models import QuotaRequestStatus
from rollout.quota_requests import quota_request_cancel, quota_request_create
from rollout.selectors import org_quota_request_get, org_quota_requests
from sluice.errors import DomainError
from sluice.messages import flash, redirect_at


@org_page(page="quota_requests")
def quota_requests(request, membership):
    return _page(request, membership, form=QuotaRequestForm())


def _page(request, membership, *, form, status_code=200):
    org = membership.org
    admitted = org_admitted(org=org)
    return render(request, "portal/quota_requests.html", {
        "org": org, "form": form, "requests": org_quota_requests(org=org),
        "allocations": org_allocations(org=org), "admitted": admitted,
        "progress": None if admitted else org_progress(org=org),
        # Asking for more needs an allocation to grow: before admission there is none.
        "can_ask": membership.role in MEMBER_MANAGERS and org.status == OrgStatus.ACTIVE,
        "pending": QuotaRequestStatus.PENDING,
    }, status=status_code)


@require_POST
@org_page(page="quota_requests", roles=MEMBER_MANAGERS)
def quota_request_new(request, membership):
    form = QuotaRequestForm(request.POST)
    if not form.is_valid():
        return _page(request, membership, form=form, status_code=400)
    try:
        created = quota_request_create(org=membership.org, actor=request.user,
                                       **form.cleaned_data)
    except DomainError as error:
        form.add_error(None, error.message)
        return _page(request, membership, form=form, status_code=error.status)
    flash(request, messages.SUCCESS, "Approved at once: your new limits are in force."
          if created.status == QuotaRequestStatus.APPROVED
          else "Your request was sent to the operators.", at="mine")
    return redirect_at("portal:quota_requests", membership.org.slug, at="mine")


@require_POST
@org_page(page="quota_requests", roles=MEMBER_MANAGERS)
def quota_request_cancel_view(request, membership, request_id: int):
    quota_request = org_quota_request_get(org=membership.org, request_id=request_id)
    flash_result(request, lambda: quota_request_cancel(request=quota_request, actor=request.user),
                 "The request was cancelled.", at="mine")
    return redirect_at("portal:quota_requests", membership.org.slug, at="mine")
