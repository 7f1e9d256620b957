"""Console pages for the rollout: the vetting queue and application page, rollout waves with
the planner, and the quota-increase inbox. Reads come from the waitlist and quota selectors,
every change from the same services the REST API calls; support staff see the pages, their
POSTs are refused (403) by the change permissions."""

from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.core.paginator import Paginator
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import redirect
from django.template.defaultfilters import pluralize
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST
from django_countries import countries

from console import permissions as perm
from console.forms import (
    ApplicationFilterForm,
    BulkDecisionForm,
    CheckForm,
    DecisionForm,
    NoteForm,
    ReasonForm,
    ReviewerForm,
    ScoreOverrideForm,
    WaveForm,
)
from console.selectors import audit_search, orgs_without_application_count
from console.views.pages import PAGE_SIZE, _render
from rollout.applications import (
    application_check_set,
    application_decide,
    application_note_add,
    application_reviewer_assign,
    application_score_override,
    applications_decide_bulk,
)
from rollout.models import (
    Application,
    CheckItem,
    QuotaRequest,
    QuotaRequestStatus,
    RolloutWave,
    WaveState,
)
from rollout.quota_requests import quota_request_approve, quota_request_deny
from rollout.selectors import quota_requests_inbox, waves_by_state
from rollout.waitlist import application_rows, reference_tps, scheduled_waves, vetting_queue
from rollout.waves import wave_close, wave_create, wave_open, wave_plan
from sluice.errors import DomainError
from sluice.forms import form_add_domain_error
from sluice.messages import flash, redirect_at

# --- Vetting ------------------------------------------------------------------------------------


def _queue_rows(form: ApplicationFilterForm) -> list[Application]:
    data = form.cleaned_data if form.is_valid() else {}
    pool = data.get("pool")
    return vetting_queue(state=data.get("state", ""), use_case=data.get("use_case", ""),
                         pool_id=pool.pk if pool else None, min_score=data.get("min_score"),
                         max_score=data.get("max_score"))


@permission_required(perm.VIEW_APPLICATIONS, raise_exception=True)
def vetting_queue_page(request, *, site, bulk_form=None, status=200):
    form = ApplicationFilterForm(request.GET or None)
    page = Paginator(_queue_rows(form), PAGE_SIZE).get_page(request.GET.get("page"))
    return _render(request, site, "console/vetting_queue.html", {
        "filter_form": form, "page": page, "bulk_form": bulk_form or BulkDecisionForm(),
        "can_decide": request.user.has_perm(perm.DECIDE_APPLICATIONS),
        "query": _query_without_page(request), "unapplied": orgs_without_application_count(),
    }, status=status)


def _query_without_page(request) -> str:
    query = request.GET.copy()
    query.pop("page", None)
    return query.urlencode()


@require_POST
@permission_required(perm.DECIDE_APPLICATIONS, raise_exception=True)
def vetting_bulk(request, *, site):
    form = BulkDecisionForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            decided = applications_decide_bulk(
                application_ids=data["applications"], decision=data["decision"],
                reason=data["reason"], shared_reason=data["shared_reason"], actor=request.user)
        except DomainError as error:
            failures = error.details.get("failures", {})
            form.add_error(None, error.message)
            for app_id, failure in failures.items():
                form.add_error(None, f"#{app_id}: {failure['message']}")
        else:
            verb = "approved" if data["decision"] == "approve" else "rejected"
            messages.success(request, f"{len(decided)} application{pluralize(len(decided))} "
                                      f"{verb}.")
            return redirect("admin:console_vetting")
    return vetting_queue_page(request, site=site, bulk_form=form, status=422)


def _application(application_id: int) -> Application:
    app = (Application.objects.select_related("org__pool_preference__pool", "reviewer",
                                              "decided_by", "score_override_by")
           .prefetch_related("checks", "notes__author").filter(pk=application_id).first())
    if app is None:
        raise Http404("No such application.")
    return application_rows([app])[0]


@permission_required(perm.VIEW_APPLICATIONS, raise_exception=True)
def application_page(request, *, site, application_id: int, forms=None, status=200):
    app = _application(application_id)
    labels = dict(CheckItem.choices)
    forms = forms or {}
    return _render(request, site, "console/application.html", {
        "app": app, "breakdown": app.score, "reference": _score_reference(app),
        "country": countries.name(app.country) or app.country,
        "checks": [(c, labels[c.item]) for c in app.checks.all()],
        "history": audit_search(target=f"rollout.application:{app.pk}")[:PAGE_SIZE],
        "can_decide": request.user.has_perm(perm.DECIDE_APPLICATIONS),
        "reviewer_form": forms.get("reviewer") or ReviewerForm(
            initial={"reviewer": app.reviewer_id}, auto_id="reviewer_%s"),
        "note_form": forms.get("note") or NoteForm(auto_id="note_%s"),
        "score_form": forms.get("score") or ScoreOverrideForm(
            initial={"score": app.score_override}, auto_id="score_%s"),
        "decision_form": forms.get("decision") or DecisionForm(auto_id="decision_%s"),
    }, status=status)


def _score_reference(app) -> str:
    """What the demand fit was measured against, in words: the score moves when the queue
    pool or its next wave changes (often on approval, when the operator picks the pool)."""
    pref = getattr(app.org, "pool_preference", None)
    if pref is None:
        return (f"No queue pool yet (no single fast pool serves “{app.preferred_region}”): demand "
                "fit counts 0 until an operator picks one, for example on approval.")
    waves = scheduled_waves(pool=pref.pool)
    reference = reference_tps(pool=pref.pool, next_wave=waves[0] if waves else None)
    if waves:
        return (f"Measured against the {reference:,} guaranteeable tokens/s that "
                f"{waves[0].name} (the next wave) adds to {pref.pool}.")
    return (f"Measured against {pref.pool}'s {reference:,} guaranteeable tokens/s: no wave "
            "is scheduled there.")


def _check(app, data, actor):
    application_check_set(application=app, item=data["item"], done=data["done"],
                          note=data["note"], actor=actor)
    return "Checklist updated."


def _reviewer(app, data, actor):
    application_reviewer_assign(application=app, reviewer=data["reviewer"], actor=actor)
    return f"{data['reviewer']} reviews this application."


def _note(app, data, actor):
    application_note_add(application=app, body=data["body"], actor=actor)
    return "Note added."


def _score(app, data, actor):
    application_score_override(application=app, score=data["score"], reason=data["reason"],
                               actor=actor)
    return "Score override saved." if data["score"] is not None else "Computed score restored."


def _decide(app, data, actor):
    decided = application_decide(application=app, decision=data["decision"],
                                 reason=data["reason"], shared_reason=data["shared_reason"],
                                 pool_id=data["pool"].pk if data["pool"] else None,
                                 actor=actor)
    return f"Application is now {decided.get_state_display().lower()}."


# op -> (form, service call). Every op is one POST that either succeeds (redirect with a
# message) or re-renders the page with the form's errors, including the service's refusal.
APPLICATION_OPS = {
    "check": (CheckForm, _check), "reviewer": (ReviewerForm, _reviewer),
    "note": (NoteForm, _note), "score": (ScoreOverrideForm, _score),
    "decision": (DecisionForm, _decide),
}


@require_POST
@permission_required(perm.DECIDE_APPLICATIONS, raise_exception=True)
def application_op(request, *, site, application_id: int, op: str):
    if op not in APPLICATION_OPS:
        raise Http404("No such action.")
    form_class, call = APPLICATION_OPS[op]
    app = _application(application_id)
    # Several forms share field names (reason): ids are prefixed by op so labels stay unique.
    form = form_class(request.POST, auto_id=f"{op}_%s")
    if form.is_valid():
        try:
            message = call(app, form.cleaned_data, request.user)
        except DomainError as error:
            form_add_domain_error(form=form, error=error)
            if op == "check":  # the checklist has no form of its own on the page
                flash(request, messages.ERROR, error.message, at=op)
                return redirect_at("admin:console_application", app.pk, at=op)
        else:
            flash(request, messages.SUCCESS, message, at=op)
            return redirect_at("admin:console_application", app.pk, at=op)
    return application_page(request, site=site, application_id=app.pk, forms={op: form},
                            status=422)


# --- Waves --------------------------------------------------------------------------------------


@permission_required(perm.VIEW_WAVES, raise_exception=True)
def wave_list(request, *, site, form=None, status=200):
    return _render(request, site, "console/wave_list.html", {
        "waves": waves_by_state(), "form": form or WaveForm(),
        "can_change": request.user.has_perm(perm.CHANGE_WAVES),
    }, status=status)


@require_POST
@permission_required(perm.CHANGE_WAVES, raise_exception=True)
def wave_create_view(request, *, site):
    form = WaveForm(request.POST)
    if form.is_valid():
        try:
            wave = wave_create(actor=request.user, **form.cleaned_data)
        except DomainError as error:
            form_add_domain_error(form=form, error=error)
        else:
            messages.success(request, f"{wave.name} is scheduled.")
            return redirect("admin:console_wave", wave.pk)
    return wave_list(request, site=site, form=form, status=422)


def _wave(wave_id: int) -> RolloutWave:
    wave = RolloutWave.objects.select_related("pool").filter(pk=wave_id).first()
    if wave is None:
        raise Http404("No such wave.")
    return wave


@permission_required(perm.VIEW_WAVES, raise_exception=True)
def wave_page(request, *, site, wave_id: int):
    wave = _wave(wave_id)
    return _render(request, site, "console/wave.html", {
        "wave": wave, "plan": wave_plan(wave=wave) if wave.state == WaveState.SCHEDULED else None,
        "can_change": request.user.has_perm(perm.CHANGE_WAVES), "close_form": ReasonForm(),
        "history": audit_search(target=f"rollout.rolloutwave:{wave.pk}")[:PAGE_SIZE],
    })


@require_POST
@permission_required(perm.CHANGE_WAVES, raise_exception=True)
def wave_open_view(request, *, site, wave_id: int):
    try:
        wave = wave_open(wave=_wave(wave_id), actor=request.user)
    except DomainError as error:
        flash(request, messages.ERROR, error.message, at="actions")
    else:
        flash(request, messages.SUCCESS, f"{wave.name} is open: {wave.admitted_count} "
                                         f"organization{pluralize(wave.admitted_count)} "
                                         f"admitted.", at="actions")
    return redirect_at("admin:console_wave", wave_id, at="actions")


@require_POST
@permission_required(perm.CHANGE_WAVES, raise_exception=True)
def wave_close_view(request, *, site, wave_id: int):
    form = ReasonForm(request.POST)
    form.is_valid()
    try:
        wave = wave_close(wave=_wave(wave_id), actor=request.user,
                          reason=form.cleaned_data.get("reason", ""))
    except DomainError as error:
        flash(request, messages.ERROR, error.message, at="actions")
    else:
        flash(request, messages.SUCCESS, f"{wave.name} is closed.", at="actions")
    return redirect_at("admin:console_wave", wave_id, at="actions")


# --- Quota-increase inbox -----------------------------------------------------------------------


@permission_required(perm.VIEW_QUOTA_REQUESTS, raise_exception=True)
def quota_inbox(request, *, site):
    status = request.GET.get("status", QuotaRequestStatus.PENDING)
    status = status if status in QuotaRequestStatus.values else QuotaRequestStatus.PENDING
    return _render(request, site, "console/quota_inbox.html", {
        "requests": Paginator(quota_requests_inbox(status=status), PAGE_SIZE).get_page(
            request.GET.get("page")),
        "page_query": _query_without_page(request),
        "status": status, "statuses": QuotaRequestStatus.choices,
        "can_decide": request.user.has_perm(perm.DECIDE_QUOTA_REQUESTS),
    })


@require_POST
@permission_required(perm.DECIDE_QUOTA_REQUESTS, raise_exception=True)
def quota_request_decide(request, *, site, request_id: int, decision: str):
    quota_request = QuotaRequest.objects.select_related("org", "pool").filter(
        pk=request_id).first()
    if quota_request is None or decision not in ("approve", "deny"):
        raise Http404("No such quota request.")
    form = ReasonForm(request.POST)
    form.is_valid()
    reason = form.cleaned_data.get("reason", "")
    service = quota_request_approve if decision == "approve" else quota_request_deny
    # Decided from the inbox or from the org page: go back there (to the list's section, where
    # the answer shows), never off the site.
    back = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()}):
        back = reverse("admin:console_quota_requests") + "#requests"
    place = back.partition("#")[2]
    try:
        service(request=quota_request, actor=request.user, reason=reason)
    except DomainError as error:
        # CapacityExhausted and friends: the request stays pending, the operator reads why.
        flash(request, messages.ERROR,
              f"{quota_request.org} in {quota_request.pool}: {error.message}", at=place)
    else:
        flash(request, messages.SUCCESS, f"Request #{quota_request.pk} of {quota_request.org}: "
                                         f"{'approved' if decision == 'approve' else 'denied'}.",
              at=place)
    return HttpResponseRedirect(back)
