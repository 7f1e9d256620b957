"""REST: org-facing apply/status/waitlist, operator queue and vetting, scoping and bad input."""

import pytest
from rest_framework.test import APIClient

from orgs.models import AuditEvent, Membership, OrgStatus, Role
from rollout.models import Application
from tests.factories import ApplicationFactory, PoolFactory, UserFactory
from tests.waitlist import applicant_org, application_data, approved_application, submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def applicant():
    org, owner = applicant_org("Acme")
    client = APIClient()
    client.force_authenticate(owner)
    return org, owner, client


def _nothing_written():
    return not Application.objects.exists() and not AuditEvent.objects.exists()


def test_an_owner_applies_and_reads_status_and_waitlist(applicant, operator_client, operator):
    org, owner, client = applicant
    pool = PoolFactory(region="us-east")
    r = client.post(f"/api/v1/org/{org.slug}/applications", application_data(), format="json")
    assert r.status_code == 201, r.json()
    app_id = r.json()["id"]
    assert r.json()["state"] == "submitted"
    assert "decision_reason" not in r.json() and "reviewer" not in r.json()

    for item in ("identity_verified", "use_case_acceptable", "contact_reachable"):
        r = operator_client.post(f"/api/v1/operator/applications/{app_id}/checklist",
                                 {"item": item, "done": True}, format="json")
        assert r.status_code == 200, r.json()
    r = operator_client.post(f"/api/v1/operator/applications/{app_id}/decision",
                             {"decision": "approve", "reason": "fits", "pool": pool.pk},
                             format="json")
    assert r.status_code == 200, r.json()
    assert (r.json()["state"], r.json()["position"]) == ("approved", 1)
    assert r.json()["score"]["use_case_points"] == 50

    r = client.get(f"/api/v1/org/{org.slug}/waitlist")
    assert r.status_code == 200
    assert r.json()["status"] == "approved"
    assert r.json()["estimate"]["position"] == 1
    assert r.json()["estimate"]["label"] == "not yet scheduled"
    r = client.get(f"/api/v1/org/{org.slug}/applications/{app_id}")
    assert r.json()["state"] == "approved"


def test_org_answers_a_request_for_information(applicant, operator_client):
    org, owner, client = applicant
    app = submit(org, owner)
    r = operator_client.post(f"/api/v1/operator/applications/{app.pk}/decision",
                             {"decision": "request_info", "reason": "vague",
                              "shared_reason": "What is your peak?"}, format="json")
    assert r.json()["state"] == "info_requested"
    r = client.get(f"/api/v1/org/{org.slug}/applications/{app.pk}")
    assert r.json()["shared_reason"] == "What is your peak?"
    r = client.patch(f"/api/v1/org/{org.slug}/applications/{app.pk}",
                     {"expected_peak_tps": 900, "response": "About 900 tokens/s."},
                     format="json")
    assert r.status_code == 200, r.json()
    assert (r.json()["state"], r.json()["expected_peak_tps"]) == ("in_review", 900)
    notes = operator_client.get(f"/api/v1/operator/applications/{app.pk}").json()["notes"]
    assert [n["body"] for n in notes] == ["About 900 tokens/s."]


def test_org_b_cannot_see_or_change_org_a_application(two_orgs):
    a, b = two_orgs
    app = ApplicationFactory(org=a.org)
    for url in (f"/api/v1/org/{a.org.slug}/applications",
                f"/api/v1/org/{a.org.slug}/applications/{app.pk}",
                f"/api/v1/org/{a.org.slug}/waitlist",
                f"/api/v1/org/{b.org.slug}/applications/{app.pk}"):
        r = b.client.get(url)
        assert r.status_code == 404, url
        assert r.json()["error"]["code"] == "not_found"
    r = b.client.patch(f"/api/v1/org/{b.org.slug}/applications/{app.pk}",
                       {"legal_name": "Hijacked"}, format="json")
    assert r.status_code == 404
    assert a.client.get(f"/api/v1/org/{a.org.slug}/applications/{app.pk}").status_code == 200
    r = b.client.get("/api/v1/operator/applications")
    assert r.status_code == 403  # not an operator


def test_a_viewer_reads_but_cannot_apply(applicant):
    org, _, _ = applicant
    viewer = UserFactory()
    Membership.objects.create(org=org, user=viewer, role=Role.VIEWER)
    client = APIClient()
    client.force_authenticate(viewer)
    assert client.get(f"/api/v1/org/{org.slug}/applications").status_code == 200
    r = client.post(f"/api/v1/org/{org.slug}/applications", application_data(), format="json")
    assert r.status_code == 403
    assert _nothing_written()


@pytest.mark.parametrize("payload", [
    {},
    application_data(website="nope"),
    application_data(country="de"),
    application_data(contact_email="x"),
    application_data(use_case="crypto"),
    application_data(latency_sensitivity=3),
    application_data(expected_peak_tps=0),
    application_data(expected_peak_tps="many"),
    application_data(expected_daily_tokens=-1),
    application_data(legal_name=""),
    {k: v for k, v in application_data().items() if k != "preferred_region"},
    ["not", "an", "object"],
])
def test_malformed_applications_are_400_and_write_nothing(applicant, payload):
    org, _, client = applicant
    r = client.post(f"/api/v1/org/{org.slug}/applications", payload, format="json")
    assert r.status_code == 400, r.json()
    assert r.json()["error"]["code"] == "invalid_input"
    assert _nothing_written()


def test_a_region_no_pool_serves_is_400_and_writes_nothing(applicant):
    """As in the portal's form: an application is queued in a region some pool serves."""
    org, owner, client = applicant
    PoolFactory(region="eu-west")
    r = client.post(f"/api/v1/org/{org.slug}/applications",
                    application_data(preferred_region="mars-1"), format="json")
    assert r.status_code == 400, r.json()
    assert r.json()["error"]["code"] == "invalid_input"
    assert "eu-west" in r.json()["error"]["fields"]["preferred_region"][0]
    assert _nothing_written()
    r = client.post(f"/api/v1/org/{org.slug}/applications",
                    application_data(preferred_region="eu-west"), format="json")
    assert r.status_code == 201, r.json()


def test_an_update_keeps_a_region_whose_pool_went_but_cannot_move_to_one(applicant,
                                                                         operator_client):
    org, owner, client = applicant
    app = submit(org, owner, preferred_region="us-east")  # no pool serves it (any longer)
    operator_client.post(f"/api/v1/operator/applications/{app.pk}/decision",
                         {"decision": "request_info", "reason": "vague",
                          "shared_reason": "What is your peak?"}, format="json")
    url = f"/api/v1/org/{org.slug}/applications/{app.pk}"
    r = client.patch(url, {"preferred_region": "mars-1"}, format="json")
    assert r.status_code == 400, r.json()
    app.refresh_from_db()
    assert app.preferred_region == "us-east"
    r = client.patch(url, {"preferred_region": "us-east", "expected_peak_tps": 500,
                           "response": "500 at peak"}, format="json")
    assert r.status_code == 200, r.json()


def test_unparseable_json_is_400(applicant):
    org, _, client = applicant
    r = client.post(f"/api/v1/org/{org.slug}/applications", "{nope",
                    content_type="application/json")
    assert (r.status_code, r.json()["error"]["code"]) == (400, "malformed_request")
    assert _nothing_written()


@pytest.mark.parametrize(("path", "payload"), [
    ("checklist", {"item": "vibes", "done": True}),
    ("checklist", {"item": "identity_verified"}),
    ("decision", {"decision": "maybe", "reason": "x"}),
    ("decision", {"decision": "approve"}),
    ("decision", {"decision": "approve", "reason": "x", "pool": 999_999}),
    ("reviewer", {"reviewer": "someone"}),
    ("notes", {"body": ""}),
    ("score-override", {"score": "high", "reason": "x"}),
    ("score-override", {"score": 10}),
    ("pool", {}),
])
def test_malformed_operator_input_is_400_and_writes_nothing(operator_client, path, payload):
    app = ApplicationFactory()
    r = operator_client.post(f"/api/v1/operator/applications/{app.pk}/{path}", payload,
                             format="json")
    assert r.status_code == 400, r.json()
    assert not AuditEvent.objects.exists()
    app.refresh_from_db()
    assert (app.state, app.score_override, app.decision) == ("submitted", None, "")


@pytest.mark.parametrize("payload", [
    {}, {"applications": [], "decision": "approve", "reason": "x"},
    {"applications": "1,2", "decision": "approve", "reason": "x"},
    {"applications": [1], "decision": "request_info", "reason": "x"},
    {"applications": [1], "decision": "approve"},
])
def test_malformed_bulk_decisions_are_400(operator_client, payload):
    r = operator_client.post("/api/v1/operator/applications/bulk-decision", payload,
                             format="json")
    assert r.status_code == 400, r.json()
    assert not AuditEvent.objects.exists()


def test_bulk_reject_with_a_shared_reason(operator_client, operator):
    apps = [submit(*applicant_org(f"Org {i}")) for i in range(3)]
    r = operator_client.post("/api/v1/operator/applications/bulk-decision", {
        "applications": [a.pk for a in apps], "decision": "reject", "reason": "full",
        "shared_reason": "We are full for this quarter."}, format="json")
    assert r.status_code == 200, r.json()
    assert sorted(r.json()["decided"]) == sorted(a.pk for a in apps)
    assert set(Application.objects.values_list("shared_reason", flat=True)) == {
        "We are full for this quarter."}
    assert {a.org.status for a in Application.objects.select_related("org")} == {
        OrgStatus.REJECTED}


def test_bulk_decision_naming_an_unknown_application_changes_nothing(operator_client):
    app = submit(*applicant_org("Real"))
    r = operator_client.post("/api/v1/operator/applications/bulk-decision", {
        "applications": [app.pk, app.pk + 1000], "decision": "reject", "reason": "x"},
        format="json")
    assert r.status_code == 404
    assert r.json()["error"]["details"]["missing"] == [app.pk + 1000]
    app.refresh_from_db()
    assert app.state == "submitted"


def _queue_of(n, operator, pool):
    for i in range(n):
        approved_application(operator, pool, f"Q{i}", use_case=["voice", "chat", "batch"][i % 3])


def test_queue_filters_and_a_constant_number_of_queries(
    operator, operator_client, django_assert_num_queries,
):
    pool, other = PoolFactory(region="us-east"), PoolFactory(region="eu-west")
    _queue_of(3, operator, pool)
    approved_application(operator, other, "Elsewhere")
    submit(*applicant_org("Fresh"))
    with django_assert_num_queries(4):
        r = operator_client.get(f"/api/v1/operator/applications?state=approved&pool={pool.pk}")
    assert [row["org"]["name"] for row in r.json()["results"]] == ["Q0", "Q1", "Q2"]
    assert [row["position"] for row in r.json()["results"]] == [1, 2, 3]
    _queue_of(3, operator, other)
    with django_assert_num_queries(4):
        r = operator_client.get("/api/v1/operator/applications?state=approved")
    assert r.json()["count"] == 7
    r = operator_client.get("/api/v1/operator/applications?use_case=batch&min_score=0")
    assert {row["use_case"] for row in r.json()["results"]} == {"batch"}
    r = operator_client.get("/api/v1/operator/applications?min_score=90")
    assert r.json()["count"] and all(row["score"]["score"] >= 90
                                     for row in r.json()["results"])
    r = operator_client.get("/api/v1/operator/applications?state=approved&max_score=50")
    assert [row["use_case"] for row in r.json()["results"]] == ["batch", "batch"]


@pytest.mark.parametrize("query", ["state=nope", "pool=abc", "min_score=x", "use_case=crypto"])
def test_bad_queue_filters_are_400(operator_client, query):
    r = operator_client.get(f"/api/v1/operator/applications?{query}")
    assert r.status_code == 400


def test_operator_score_override_and_detail(operator_client, operator):
    pool = PoolFactory(region="us-east")
    approved_application(operator, pool, "Voicey", use_case="voice")
    batch = approved_application(operator, pool, "Batchy", use_case="batch")
    r = operator_client.post(f"/api/v1/operator/applications/{batch.pk}/score-override",
                             {"score": 999, "reason": "design partner"}, format="json")
    assert r.status_code == 200
    assert (r.json()["score"]["score"], r.json()["score"]["computed"],
            r.json()["position"]) == (999, batch_score(r), 1)
    detail = operator_client.get(f"/api/v1/operator/applications/{batch.pk}").json()
    assert [c["item"] for c in detail["checklist"]][:1] == ["identity_verified"]
    assert operator_client.get("/api/v1/operator/applications/999999").status_code == 404


def batch_score(response) -> int:
    s = response.json()["score"]
    return s["use_case_points"] + s["latency_points"] + s["demand_fit_points"]


@pytest.mark.django_db
def test_an_application_without_checklist_rows_is_ticked_not_a_500(operator_client):
    """Found by the schemathesis run (tests/test_openapi_conformance.py): an application that
    did not come through application_submit (admin, import) had no checklist rows, and ticking
    an item was a 500."""
    app = ApplicationFactory()
    response = operator_client.post(f"/api/v1/operator/applications/{app.pk}/checklist",
                                    {"item": "contact_reachable", "done": True}, format="json")
    assert response.status_code == 200
    checklist = {c["item"]: c["done"] for c in response.json()["checklist"]}
    assert checklist == {"contact_reachable": True}
