"""Waitlist applications and vetting: apply, re-apply, checklist, reviewer, notes, decisions;
and the pool whose waitlist an org queues in.

Decisions move the organization through the lifecycle services (org_review_start, org_approve,
org_reject, org_reapply), so the org's status and its application never disagree; the emails
of those transitions go out from rollout's receiver of `org_transitioned`. Every step is
audited.

The queue an approved org waits in is its pool: a region served by one fast pool picks it when
the org applies; otherwise the operator chooses it, and approving without one is refused.
"""

import re
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from orgs.models import Organization, OrgStatus
from orgs.services.audit import Actor, audit_record
from orgs.services.lifecycle import org_approve, org_reapply, org_reject, org_review_start
from quotas.models import CapacityPool, Tier
from rollout.models import (
    CHECK_VOUCHES_FOR,
    CHECKS_REQUIRED_FOR_APPROVAL,
    OPEN_APPLICATION_STATES,
    Application,
    ApplicationCheck,
    ApplicationNote,
    ApplicationState,
    CheckItem,
    Decision,
    OrgPoolPreference,
)
from rollout.notifications import application_email_queue
from sluice.errors import (
    Conflict,
    DomainError,
    IllegalTransition,
    NotFound,
    Unprocessable,
    error_body,
)
from sluice.transactions import nestable

A = ApplicationState

# What an applicant fills in (and may correct while the application waits for information).
APPLICANT_FIELDS = (
    "legal_name", "website", "country", "contact_name", "contact_email", "use_case",
    "use_case_description", "expected_peak_tps", "expected_daily_tokens",
    "latency_sensitivity", "preferred_region",
)
UNDECIDED_STATES = frozenset({A.SUBMITTED, A.IN_REVIEW, A.INFO_REQUESTED})
COUNTRY_CODE = re.compile(r"^[A-Z]{2}$")


def _user(actor: Actor):
    return actor if isinstance(actor, AbstractBaseUser) and actor.is_authenticated else None


def _snapshot(app: Application) -> dict:
    return {"state": app.state, **{f: getattr(app, f) for f in APPLICANT_FIELDS}}


def _validate(app: Application) -> None:
    """Model validation (choices, lengths, URL, email) plus what the model cannot say; raised as
    one 400 naming every bad field, so admin, seed and REST callers get the same answer."""
    errors = {}
    try:
        app.full_clean(exclude=["org", "submitted_by", "reviewer", "decided_by",
                                "score_override_by"], validate_constraints=False)
    except ValidationError as exc:
        errors.update(exc.message_dict)
    if not COUNTRY_CODE.match(app.country or ""):
        errors.setdefault("country", []).append("Use an ISO 3166-1 alpha-2 code, like DE.")
    for name in ("expected_peak_tps", "expected_daily_tokens"):
        if isinstance(getattr(app, name), int) and getattr(app, name) < 1:
            errors.setdefault(name, []).append("Must be at least 1.")
    if errors:
        raise DomainError("The application is invalid.", code="invalid_application",
                          fields=errors)


def _cooling_off_check(org: Organization) -> None:
    last = (Application.objects.filter(org=org, state=A.REJECTED)
            .order_by("-decided_at").values_list("decided_at", flat=True).first())
    rejected_at = last or org.status_changed_at
    available_at = rejected_at + timedelta(days=settings.REAPPLY_COOLING_OFF_DAYS)
    if timezone.now() < available_at:
        raise Conflict(
            f"{org.name} was rejected on {rejected_at:%Y-%m-%d} and may apply again from "
            f"{available_at:%Y-%m-%d %H:%M} UTC.",
            code="cooling_off", details={"available_at": available_at.isoformat()},
        )


def _close_stale_applications(*, org: Organization, actor: Actor) -> None:
    """An org rejected straight through the lifecycle (org_reject, not application_decide)
    leaves its application open; close it, so it neither blocks re-applying nor lingers."""
    for app in (Application.objects.filter(org=org, state__in=OPEN_APPLICATION_STATES)
                .order_by("pk")):
        app.state, app.decision, app.decided_at = A.REJECTED, Decision.REJECT, org.status_changed_at
        app.save(update_fields=["state", "decision", "decided_at", "updated_at"])
        audit_record(actor=actor, action="application.close_stale", target=app, org=org,
                     after={"state": A.REJECTED}, reason="organization was rejected")


@transaction.atomic(durable=True)
def application_submit(*, org: Organization, data: dict, actor: Actor) -> Application:
    """Apply, or re-apply after a rejection once the cooling-off period has passed."""
    # Lock the org: two submissions at once must not both pass the "no open application" check
    # (the partial unique index would stop the second anyway, with a less helpful error).
    org = Organization.objects.select_for_update().get(pk=org.pk)
    if org.status == OrgStatus.REJECTED:
        _close_stale_applications(org=org, actor=actor)
    if Application.objects.filter(org=org, state__in=OPEN_APPLICATION_STATES).exists():
        raise Conflict(f"{org.name} already has an open application.", code="application_open")
    app = Application(org=org, submitted_by=_user(actor), submitted_at=timezone.now(),
                      **{f: data.get(f) for f in APPLICANT_FIELDS})
    _validate(app)
    if org.status == OrgStatus.REJECTED:
        _cooling_off_check(org)
        org_reapply.nested(org=org, actor=actor, reason="re-application")
    elif org.status != OrgStatus.APPLIED:
        raise Conflict(f"{org.name} is {org.status}; only new or rejected organizations apply.",
                       code="org_cannot_apply", details={"status": org.status})
    app.save()
    ApplicationCheck.objects.bulk_create(
        ApplicationCheck(application=app, item=item) for item in CheckItem.values
    )
    _pool_preference_from_region(application=app, actor=actor)
    audit_record(actor=actor, action="application.submit", target=app, org=org,
                 after=_snapshot(app))
    application_email_queue(application=app, kind="received")
    return app


def _lock(app: Application) -> Application:
    """The org, then its application: the house lock order (quotas/services.py). A wave opening
    holds the org and then admits its application; the other way round, the two deadlock."""
    Organization.objects.select_for_update().get(pk=app.org_id)
    return (Application.objects.select_for_update(of=("self",)).select_related("org")
            .get(pk=app.pk))


def _review_start(*, app: Application, actor: Actor) -> None:
    """submitted -> in_review, taking the org along (applied -> in_review)."""
    if app.state != A.SUBMITTED:
        return
    if app.org.status == OrgStatus.APPLIED:
        org_review_start.nested(org=app.org, actor=actor)
    app.state = A.IN_REVIEW


@transaction.atomic(durable=True)
def application_update(*, application: Application, data: dict, actor: Actor,
                       response: str = "") -> Application:
    """The applicant corrects or completes an undecided application. Answering a request for
    information puts it back in review; `response` is kept as a note. A checklist tick that
    vouched for a changed answer (CHECK_VOUCHES_FOR) is undone."""
    app = _lock(application)
    if app.state not in (A.SUBMITTED, A.INFO_REQUESTED):
        raise IllegalTransition(f"An application that is {app.state} cannot be changed.",
                                details={"state": app.state})
    before = _snapshot(app)
    for name in APPLICANT_FIELDS:
        if name in data:
            setattr(app, name, data[name])
    _validate(app)
    if app.state == A.INFO_REQUESTED:
        app.state = A.IN_REVIEW
    app.save()
    _checks_reset_for_changes(app=app, before=before, actor=actor)
    if response.strip():
        ApplicationNote.objects.create(application=app, author=_user(actor), body=response)
    audit_record(actor=actor, action="application.update", target=app, org=app.org,
                 before=before, after=_snapshot(app), reason=response)
    return app


def _checks_reset_for_changes(*, app: Application, before: dict, actor: Actor) -> None:
    """Undo the ticks that vouched for answers the applicant just changed (values compared
    after validation, so re-sending the same answers resets nothing)."""
    changed = {name for name in APPLICANT_FIELDS if getattr(app, name) != before[name]}
    items = [item for item, fields in CHECK_VOUCHES_FOR.items() if changed & set(fields)]
    for check in ApplicationCheck.objects.select_for_update().filter(
            application=app, item__in=items, done=True).order_by("pk"):
        fields = sorted(changed & set(CHECK_VOUCHES_FOR[check.item]))
        check.done, check.done_at, check.done_by_label = False, None, ""
        check.note = f"Reset: the applicant changed {', '.join(fields)}."
        check.save(update_fields=["done", "done_at", "done_by_label", "note"])
        audit_record(actor=actor, action="application.check_reset", target=app, org=app.org,
                     before={check.item: True}, after={check.item: False}, reason=check.note)


@nestable
@transaction.atomic(durable=True)
def application_check_set(*, application: Application, item: str, done: bool, actor: Actor,
                          note: str = "") -> ApplicationCheck:
    """Tick or untick a checklist item. Billing ticks `payment_method_on_file` as "stripe"."""
    if item not in CheckItem.values:
        raise DomainError(f"Unknown checklist item {item!r}.", code="invalid_check_item",
                          details={"allowed": CheckItem.values})
    app = _lock(application)
    if app.state == A.REJECTED:
        raise IllegalTransition("A rejected application's checklist is closed.")
    # application_submit creates every item's row; an application that came another way (the
    # admin, an import) has none yet, and a missing row is an item not ticked.
    check, _ = ApplicationCheck.objects.select_for_update().get_or_create(application=app,
                                                                          item=item)
    before = {"done": check.done}
    check.done, check.note = done, note
    check.done_at = timezone.now() if done else None
    user = _user(actor)
    check.done_by_label = (user.get_username() if user else str(actor or "system")) if done else ""
    check.save()
    audit_record(actor=actor, action="application.check", target=app, org=app.org,
                 before={item: before["done"]}, after={item: done}, reason=note)
    return check


@transaction.atomic(durable=True)
def application_reviewer_assign(*, application: Application, reviewer, actor: Actor
                                ) -> Application:
    if not (reviewer.is_active and reviewer.is_staff):
        raise Unprocessable(f"{reviewer} is not an operator.", code="reviewer_not_operator")
    app = _lock(application)
    if app.state not in UNDECIDED_STATES:
        raise IllegalTransition(f"An application that is {app.state} needs no reviewer.")
    before = {"reviewer": app.reviewer_id, "state": app.state}
    app.reviewer = reviewer
    _review_start(app=app, actor=actor)
    app.save(update_fields=["reviewer", "state", "updated_at"])
    audit_record(actor=actor, action="application.assign", target=app, org=app.org,
                 before=before, after={"reviewer": reviewer.pk, "state": app.state})
    return app


@transaction.atomic(durable=True)
def application_note_add(*, application: Application, body: str, actor: Actor
                         ) -> ApplicationNote:
    if not body.strip():
        raise DomainError("A note needs some text.", code="empty_note")
    note = ApplicationNote.objects.create(application=application, author=_user(actor),
                                          body=body.strip())
    audit_record(actor=actor, action="application.note", target=application,
                 org=application.org, after={"note": note.pk}, reason=note.body)
    return note


def _check_approvable(app: Application, pool_id: int | None, actor: Actor) -> None:
    missing = list(ApplicationCheck.objects.filter(
        application=app, item__in=CHECKS_REQUIRED_FOR_APPROVAL, done=False,
    ).values_list("item", flat=True))
    if missing:
        raise Unprocessable("Tick the vetting checklist before approving.",
                            code="checklist_incomplete", details={"missing": sorted(missing)})
    _pool_preference_for_approval(application=app, pool_id=pool_id, actor=actor)


@nestable
@transaction.atomic(durable=True)
def application_decide(*, application: Application, decision: str, reason: str, actor: Actor,
                       shared_reason: str = "", pool_id: int | None = None
                       ) -> Application:
    """Approve, reject or ask for more information. `reason` is internal (audit log);
    `shared_reason` is what the org reads (required when asking for information); `pool_id`
    is the pool whose waitlist an approved org joins (it must exist)."""
    if decision not in Decision.values:
        raise DomainError(f"Unknown decision {decision!r}.", code="invalid_decision")
    if not reason.strip():
        raise DomainError("A decision needs a reason.", code="reason_required")
    if decision == Decision.REQUEST_INFO and not shared_reason.strip():
        raise DomainError("Say what information is needed (shared_reason).",
                          code="reason_required")
    app = _lock(application)
    if app.state not in UNDECIDED_STATES:
        raise IllegalTransition(f"This application is already {app.state}.",
                                details={"state": app.state})
    before = {"state": app.state}
    _review_start(app=app, actor=actor)
    if decision == Decision.APPROVE:
        _check_approvable(app, pool_id, actor)
        org_approve.nested(org=app.org, actor=actor, reason=reason)
        app.state = A.APPROVED
    elif decision == Decision.REJECT:
        org_reject.nested(org=app.org, actor=actor, reason=reason)
        app.state = A.REJECTED
    else:
        app.state = A.INFO_REQUESTED
    app.decision, app.decision_reason, app.shared_reason = decision, reason, shared_reason
    app.decided_by, app.decided_at = _user(actor), timezone.now()
    app.save()
    if app.state == A.INFO_REQUESTED:
        application_email_queue(application=app, kind="info_requested")
    audit_record(actor=actor, action=f"application.{decision}", target=app, org=app.org,
                 before=before, after={"state": app.state, "shared_reason": shared_reason},
                 reason=reason)
    return app


@transaction.atomic(durable=True)
def applications_decide_bulk(*, application_ids: list[int], decision: str, reason: str,
                             actor: Actor, shared_reason: str = "") -> list[Application]:
    """All or nothing: every application is tried (each in a savepoint) so the error names
    every failure, then one failure rolls back the lot."""
    if decision not in (Decision.APPROVE, Decision.REJECT):
        raise DomainError("Bulk decisions approve or reject.", code="invalid_decision")
    # The orgs, then their applications, each in primary-key order (the house lock order,
    # quotas/services.py): overlapping bulk decisions and wave openings cannot deadlock.
    list(Organization.objects.select_for_update().filter(
        pk__in=Application.objects.filter(pk__in=application_ids).values("org_id"))
        .order_by("pk"))
    apps = list(Application.objects.select_for_update().filter(pk__in=application_ids)
                .order_by("pk"))
    missing = sorted(set(application_ids) - {a.pk for a in apps})
    if missing:
        raise NotFound("Unknown applications.", details={"missing": missing})
    decided, failures = [], {}
    for app in apps:
        try:
            with transaction.atomic():
                decided.append(application_decide.nested(
                    application=app, decision=decision, reason=reason,
                    shared_reason=shared_reason, actor=actor))
        except DomainError as exc:
            failures[str(app.pk)] = error_body(code=exc.code, message=exc.message,
                                               fields=exc.fields, details=exc.details)["error"]
    if failures:
        raise Conflict(f"{len(failures)} of {len(apps)} applications cannot be decided; "
                       "none were.", code="bulk_decision_failed",
                       details={"failures": failures})
    return decided


@nestable
@transaction.atomic(durable=True)
def application_score_override(*, application: Application, score: int | None, reason: str,
                               actor: Actor) -> Application:
    """Replace the computed score (None restores it). Always with a reason."""
    if not reason.strip():
        raise DomainError("An override needs a reason.", code="reason_required")
    app = _lock(application)
    before = {"score_override": app.score_override, "reason": app.score_override_reason}
    app.score_override = score
    app.score_override_reason = reason if score is not None else ""
    app.score_override_by = _user(actor) if score is not None else None
    app.save(update_fields=["score_override", "score_override_reason", "score_override_by",
                            "updated_at"])
    audit_record(actor=actor, action="application.score_override", target=app, org=app.org,
                 before=before, after={"score_override": score}, reason=reason)
    return app


@nestable
@transaction.atomic(durable=True)
def org_pool_preference_set(*, org: Organization, pool: CapacityPool, actor: Actor) -> None:
    """Choose the pool whose waitlist the org queues in."""
    before = OrgPoolPreference.objects.filter(org=org).values_list("pool_id", flat=True).first()
    OrgPoolPreference.objects.update_or_create(org=org, defaults={"pool": pool})
    audit_record(actor=actor, action="org.pool_preference_set", target=org, org=org,
                 before={"pool": before}, after={"pool": pool.pk})


def _pool_preference_from_region(*, application: Application, actor: Actor) -> None:
    """A region served by exactly one fast pool decides the queue the org will wait in."""
    pools = list(CapacityPool.objects.filter(region=application.preferred_region,
                                             tier=Tier.FAST)[:2])
    if len(pools) == 1 and not OrgPoolPreference.objects.filter(org=application.org).exists():
        org_pool_preference_set.nested(org=application.org, pool=pools[0], actor=actor)


def _pool_preference_for_approval(*, application: Application, pool_id: int | None,
                                  actor: Actor) -> None:
    """Record the operator's choice of queue; an approved org must wait in some pool's."""
    if pool_id is not None:
        pool = CapacityPool.objects.filter(pk=pool_id).first()
        if pool is None:
            raise NotFound("No such pool.", code="unknown_pool")
        org_pool_preference_set.nested(org=application.org, pool=pool, actor=actor)
    elif not OrgPoolPreference.objects.filter(org=application.org).exists():
        raise Unprocessable("Choose the pool this organization will queue for.",
                            code="pool_required")
