"""Applying for access: the application form, and correcting it while it waits for
information. The rules (one open application, cooling-off after a rejection, field checks) are
the service's; this view shows its answers on the form."""

from django.contrib import messages
from django.shortcuts import redirect, render

from orgs.models import MEMBER_MANAGERS
from portal.access import org_page
from portal.forms import ApplicationForm, ApplicationUpdateForm
from portal.selectors import org_latest_application
from rollout.applications import APPLICANT_FIELDS, application_submit, application_update
from rollout.models import ApplicationState
from sluice.errors import DomainError
from sluice.forms import form_add_domain_error

EDITABLE_STATES = (ApplicationState.SUBMITTED, ApplicationState.INFO_REQUESTED)


@org_page(page="status", roles=MEMBER_MANAGERS)
def application(request, membership):
    org = membership.org
    latest = org_latest_application(org=org)
    editing = latest is not None and latest.state in EDITABLE_STATES
    form_class = ApplicationUpdateForm if editing else ApplicationForm
    initial = _answers(latest) if latest is not None else {"contact_email": request.user.email}
    form = form_class(request.POST or None, initial=initial)
    status_code = 200
    if request.method == "POST":
        status_code = 400
        if form.is_valid():
            try:
                _save(form, latest if editing else None, org=org, actor=request.user)
            except DomainError as error:
                form_add_domain_error(form=form, error=error)
                status_code = error.status
            else:
                messages.success(request, "Your application was updated." if editing
                                 else "Your application was submitted.")
                return redirect("portal:status", org.slug)
    return render(request, "portal/application.html", {
        "org": org, "form": form, "editing": editing, "application": latest,
    }, status=status_code)


def _answers(app) -> dict:
    return {name: getattr(app, name) for name in APPLICANT_FIELDS}


def _save(form, editable, *, org, actor) -> None:
    data = {name: form.cleaned_data[name] for name in APPLICANT_FIELDS}
    if editable is None:
        application_submit(org=org, data=data, actor=actor)
    else:
        application_update(application=editable, data=data, actor=actor,
                           response=form.cleaned_data.get("response", ""))
