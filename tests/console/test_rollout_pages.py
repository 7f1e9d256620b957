"""Console pages for vetting, waves and quota requests: operators change through the services,
support staff read and are refused every POST with nothing changed."""

import pytest
from django.contrib.auth.models import Group

from orgs.models import AuditEvent, OrgStatus
from quotas.models import Allocation
from rollout.models import Application, CheckItem, QuotaRequest, RolloutWave, WaveState
from rollout.quota_requests import quota_request_create
from tests.factories import AllocationFactory, OrganizationFactory, PoolFactory, RolloutWaveFactory
from tests.waitlist import applicant_org, approved_application, submit, tick_required

pytestmark = pytest.mark.django_db


def _messages(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def _pending_request(*, pool, guaranteed_tps: int, name: str = "Asker"):
    org = OrganizationFactory(name=name, status=OrgStatus.ACTIVE)
    AllocationFactory(org=org, pool=pool, guaranteed_tps=500, burst_tps=1_000)
    return quota_request_create(org=org, pool=pool, guaranteed_tps=guaranteed_tps,
                                burst_tps=guaranteed_tps, daily_tokens=50_000_000,
                                max_concurrency=20, reason="launch", actor="test")


def test_migration_gives_support_views_and_operator_decisions():
    support = set(Group.objects.get(name="support").permissions.values_list("codename", flat=True))
    operator = set(Group.objects.get(name="operator").permissions.values_list("codename",
                                                                              flat=True))
    assert {"view_application", "view_rolloutwave", "view_quotarequest", "view_invoice",
            "view_outboxmessage", "view_gatewaytoken", "view_priceversion"} <= support
    assert not {"change_application", "change_rolloutwave", "change_quotarequest"} & support
    assert {"change_application", "add_rolloutwave", "change_rolloutwave",
            "change_quotarequest", "add_priceversion", "change_outboxmessage"} <= operator


def test_vetting_queue_filters_by_use_case_and_score(operator_console, operator_user):
    pool = PoolFactory()
    voice = approved_application(operator_user, pool, "Voice Co", use_case="voice")
    batch = approved_application(operator_user, pool, "Batch Co", use_case="batch",
                                 latency_sensitivity="tolerant")
    page = operator_console.get("/admin/console/applications/")
    assert [a.pk for a in page.context["page"]] == [voice.pk, batch.pk]
    only_batch = operator_console.get("/admin/console/applications/?use_case=batch")
    assert [a.pk for a in only_batch.context["page"]] == [batch.pk]
    scores = {a.pk: a.score.score for a in page.context["page"]}
    high = operator_console.get(f"/admin/console/applications/?min_score={scores[voice.pk]}")
    assert [a.pk for a in high.context["page"]] == [voice.pk]


def test_vetting_queue_has_a_constant_number_of_queries(operator_console, operator_user,
                                                        django_assert_num_queries):
    pool = PoolFactory()
    approved_application(operator_user, pool, "First")

    def count() -> int:
        from django.db import connection
        from django.test.utils import CaptureQueriesContext
        with CaptureQueriesContext(connection) as ctx:
            assert operator_console.get("/admin/console/applications/").status_code == 200
        return len(ctx)

    few = count()
    for i in range(4):
        approved_application(operator_user, pool, f"More {i}")
    with django_assert_num_queries(few):
        operator_console.get("/admin/console/applications/")


def test_bulk_approve_and_its_all_or_nothing_error(operator_console, operator_user):
    pool = PoolFactory(region="us-east")
    ready_org, owner = applicant_org("Ready")
    ready = submit(ready_org, owner)
    tick_required(ready, operator_user)
    unready_org, owner2 = applicant_org("Unready")
    unready = submit(unready_org, owner2)
    body = {"decision": "approve", "reason": "good fit", "applications": [ready.pk, unready.pk]}
    refused = operator_console.post("/admin/console/applications/bulk/", body)
    assert refused.status_code == 422
    page = refused.content.decode()
    assert "none were" in page and "Tick the vetting checklist" in page
    assert Application.objects.get(pk=ready.pk).state != "approved"

    body["applications"] = [ready.pk]
    done = operator_console.post("/admin/console/applications/bulk/", body)
    assert done.status_code == 302
    assert Application.objects.get(pk=ready.pk).state == "approved"
    assert pool.pk == ready_org.pool_preference.pool_id


def test_application_page_checklist_note_score_and_decision(operator_console, operator_user):
    PoolFactory(region="us-east")
    org, owner = applicant_org("Vetted")
    app = submit(org, owner)
    url = f"/admin/console/applications/{app.pk}/"
    page = operator_console.get(url)
    assert page.status_code == 200 and "Demand fit" in page.content.decode()

    refused = operator_console.post(url + "decision/", {"decision": "approve", "reason": "ok"})
    assert refused.status_code == 422
    assert "Tick the vetting checklist" in refused.content.decode()

    for item in (CheckItem.IDENTITY_VERIFIED, CheckItem.USE_CASE_ACCEPTABLE,
                 CheckItem.CONTACT_REACHABLE):
        assert operator_console.post(url + "check/", {"item": item, "done": "on"}).status_code \
            == 302
    assert operator_console.post(url + "note/", {"body": "Called them."}).status_code == 302
    assert operator_console.post(url + "reviewer/",
                                 {"reviewer": operator_user.pk}).status_code == 302
    assert operator_console.post(url + "score/", {"score": "99", "reason": "strategic"}
                                 ).status_code == 302
    assert operator_console.post(url + "decision/", {"decision": "approve", "reason": "ok"}
                                 ).status_code == 302
    app.refresh_from_db()
    assert (app.state, app.score_override, app.reviewer_id) == ("approved", 99, operator_user.pk)
    history = operator_console.get(url).context["history"]
    assert {"application.check", "application.note", "application.assign",
            "application.score_override", "application.approve"} <= {e.action for e in history}


def test_request_info_needs_a_shared_reason(operator_console):
    org, owner = applicant_org("Vague")
    app = submit(org, owner)
    response = operator_console.post(f"/admin/console/applications/{app.pk}/decision/",
                                     {"decision": "request_info", "reason": "unclear"})
    assert response.status_code == 422 and "Say what information is needed" in \
        response.content.decode()
    ok = operator_console.post(f"/admin/console/applications/{app.pk}/decision/",
                               {"decision": "request_info", "reason": "unclear",
                                "shared_reason": "What is your peak?"})
    assert ok.status_code == 302
    assert Application.objects.get(pk=app.pk).state == "info_requested"


def test_operator_plans_opens_and_closes_a_wave(operator_console, operator_user):
    pool = PoolFactory(region="us-east", capacity_tps=1_000)
    apps = [approved_application(operator_user, pool, f"Q{i}", use_case=uc)
            for i, uc in enumerate(["voice", "agents", "batch"])]
    created = operator_console.post("/admin/console/waves/new/", {
        "pool": pool.pk, "name": "GA", "opens_at": "2030-01-01T10:00", "capacity_tps": 1_000,
        "max_orgs": 10, "guaranteed_tps": 700, "burst_tps": 1_000, "daily_tokens": 1_000_000,
        "max_concurrency": 8})
    assert created.status_code == 302
    wave = RolloutWave.objects.get(name="GA")
    plan = operator_console.get(f"/admin/console/waves/{wave.pk}/").context["plan"]
    assert [e.application.pk for e in plan.admitted] == [apps[0].pk, apps[1].pk]
    assert plan.queued_after == 1

    opened = operator_console.post(f"/admin/console/waves/{wave.pk}/open/", follow=True)
    assert "GA is open: 2 organizations admitted." in _messages(opened)
    assert Allocation.objects.filter(pool=pool, guaranteed_tps=700).count() == 2
    again = operator_console.post(f"/admin/console/waves/{wave.pk}/open/", follow=True)
    assert _messages(again) and "scheduled" in _messages(again)[0].lower()
    operator_console.post(f"/admin/console/waves/{wave.pk}/close/", {"reason": "done"})
    assert RolloutWave.objects.get(pk=wave.pk).state == WaveState.CLOSED


def test_invalid_wave_shows_the_services_field_errors(operator_console):
    pool = PoolFactory(capacity_tps=1_000)
    response = operator_console.post("/admin/console/waves/new/", {
        "pool": pool.pk, "name": "Bad", "opens_at": "2030-01-01T10:00", "capacity_tps": 0,
        "max_orgs": 1, "guaranteed_tps": 600, "burst_tps": 500, "daily_tokens": 1,
        "max_concurrency": 1})
    assert response.status_code == 422
    assert response.context["form"].errors["burst_tps"] == ["Must be at least guaranteed_tps."]
    assert not RolloutWave.objects.exists()


def test_quota_inbox_approves_within_capacity_and_explains_exhaustion(operator_console):
    pool = PoolFactory(capacity_tps=10_000)  # 9,000 guaranteeable
    fits = _pending_request(pool=pool, guaranteed_tps=2_000, name="Fits")
    too_big = _pending_request(pool=pool, guaranteed_tps=8_000, name="Too big")
    inbox = operator_console.get("/admin/console/quota-requests/")
    assert [r.pk for r in inbox.context["requests"]] == [fits.pk, too_big.pk]

    ok = operator_console.post(f"/admin/console/quota-requests/{fits.pk}/approve/", follow=True)
    assert "approved" in _messages(ok)[0]
    refused = operator_console.post(f"/admin/console/quota-requests/{too_big.pk}/approve/",
                                    follow=True)
    assert "Too big" in _messages(refused)[0] and "cannot guarantee" in _messages(refused)[0]
    assert QuotaRequest.objects.get(pk=too_big.pk).status == "pending"

    no_reason = operator_console.post(f"/admin/console/quota-requests/{too_big.pk}/deny/",
                                      follow=True)
    assert "Say why" in _messages(no_reason)[0]
    operator_console.post(f"/admin/console/quota-requests/{too_big.pk}/deny/",
                          {"reason": "no room this month"})
    assert QuotaRequest.objects.get(pk=too_big.pk).status == "denied"


def test_quota_inbox_never_redirects_off_site(operator_console):
    request = _pending_request(pool=PoolFactory(), guaranteed_tps=600)
    response = operator_console.post(f"/admin/console/quota-requests/{request.pk}/deny/",
                                     {"reason": "no", "next": "https://evil.example/"})
    assert response["Location"] == "/admin/console/quota-requests/#requests"


def test_org_page_lists_its_quota_requests(operator_console):
    request = _pending_request(pool=PoolFactory(), guaranteed_tps=600)
    page = operator_console.get(f"/admin/console/orgs/{request.org_id}/")
    assert [r.pk for r in page.context["requests"]] == [request.pk]


def test_quota_inbox_query_count_is_constant(operator_console, django_assert_num_queries):
    pool = PoolFactory()
    _pending_request(pool=pool, guaranteed_tps=600, name="One")
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    with CaptureQueriesContext(connection) as ctx:
        operator_console.get("/admin/console/quota-requests/")
    for i in range(3):
        _pending_request(pool=pool, guaranteed_tps=600, name=f"More {i}")
    with django_assert_num_queries(len(ctx)):
        operator_console.get("/admin/console/quota-requests/")


def test_support_reads_every_page_but_every_post_is_refused(support_console, operator_user):
    pool = PoolFactory(region="us-east", capacity_tps=1_000)
    app = approved_application(operator_user, pool, "Queued")
    org, owner = applicant_org("Pending")
    open_app = submit(org, owner)
    wave = RolloutWaveFactory(pool=pool, capacity_tps=1_000)
    request = _pending_request(pool=pool, guaranteed_tps=600)
    for url in ("/admin/console/applications/", f"/admin/console/applications/{app.pk}/",
                "/admin/console/waves/", f"/admin/console/waves/{wave.pk}/",
                "/admin/console/quota-requests/"):
        page = support_console.get(url)
        assert page.status_code == 200, url
        body = page.content.decode()
        assert 'method="post"' not in body.replace(
            'method="post" action="/admin/logout/"', ""), url
    before = AuditEvent.objects.count()
    posts = [
        ("/admin/console/applications/bulk/", {"decision": "approve", "reason": "x",
                                               "applications": [open_app.pk]}),
        *[(f"/admin/console/applications/{open_app.pk}/{op}/", body) for op, body in [
            ("check", {"item": "identity_verified", "done": "on"}), ("note", {"body": "x"}),
            ("reviewer", {"reviewer": operator_user.pk}),
            ("score", {"score": "1", "reason": "x"}),
            ("decision", {"decision": "reject", "reason": "x"})]],
        ("/admin/console/waves/new/", {"pool": pool.pk, "name": "W"}),
        (f"/admin/console/waves/{wave.pk}/open/", {}),
        (f"/admin/console/waves/{wave.pk}/close/", {}),
        (f"/admin/console/quota-requests/{request.pk}/approve/", {}),
        (f"/admin/console/quota-requests/{request.pk}/deny/", {"reason": "x"}),
    ]
    for url, body in posts:
        assert support_console.post(url, body).status_code == 403, url
    assert AuditEvent.objects.count() == before
    assert RolloutWave.objects.get(pk=wave.pk).state == WaveState.SCHEDULED
    assert QuotaRequest.objects.get(pk=request.pk).status == "pending"


def test_wave_list_query_count_is_constant(operator_console, django_assert_num_queries):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    RolloutWaveFactory()
    with CaptureQueriesContext(connection) as ctx:
        operator_console.get("/admin/console/waves/")
    for _ in range(4):
        RolloutWaveFactory()
    with django_assert_num_queries(len(ctx)):
        operator_console.get("/admin/console/waves/")
