"""An applicant who changes an answer an operator has vetted undoes that check: a verified
identity does not carry over to a new legal name, website or country, nor a reachable contact
to a new contact. Through the REST API (rollout's applications views) and the portal: one rule,
in rollout.applications."""

import pytest
from rest_framework.test import APIClient

from orgs.models import AuditEvent
from rollout.applications import application_decide
from rollout.models import ApplicationCheck, CheckItem, Decision
from tests.factories import OperatorFactory, PoolFactory
from tests.waitlist import applicant_org, submit, tick_required

pytestmark = pytest.mark.django_db

IDENTITY, CONTACT, USE_CASE = (CheckItem.IDENTITY_VERIFIED, CheckItem.CONTACT_REACHABLE,
                               CheckItem.USE_CASE_ACCEPTABLE)


@pytest.fixture
def vetted():
    """An application with the three required checks ticked, then asked for information."""
    operator = OperatorFactory()
    org, owner = applicant_org("Acme")
    app = submit(org, owner)
    tick_required(app, operator)
    application_decide(application=app, decision=Decision.REQUEST_INFO, actor=operator,
                       reason="peak?", shared_reason="What is your peak?")
    client = APIClient()
    client.force_authenticate(owner)
    return app, client, f"/api/v1/org/{org.slug}/applications/{app.pk}"


def _ticked(app) -> set[str]:
    return set(ApplicationCheck.objects.filter(application=app, done=True)
               .values_list("item", flat=True))


@pytest.mark.parametrize(("change", "undone"), [
    ({"legal_name": "Someone Else Ltd"}, {IDENTITY}),
    ({"website": "https://elsewhere.example"}, {IDENTITY}),
    ({"country": "FR"}, {IDENTITY}),
    ({"contact_email": "mallory@elsewhere.example"}, {CONTACT}),
    ({"contact_name": "Mallory"}, {CONTACT}),
    ({"use_case": "batch"}, {USE_CASE}),
    ({"legal_name": "Someone Else Ltd", "contact_email": "m@elsewhere.example"},
     {IDENTITY, CONTACT}),
    ({"expected_peak_tps": 900}, set()),            # not vouched for by any check
    ({"legal_name": "Acme Voice GmbH"}, set()),     # the same answer again: nothing changed
])
def test_a_changed_answer_undoes_the_check_that_vouched_for_it(vetted, change, undone):
    app, client, url = vetted
    response = client.patch(url, {**change, "response": "updated"}, format="json")
    assert response.status_code == 200, response.json()
    assert _ticked(app) == {IDENTITY, CONTACT, USE_CASE} - undone
    resets = AuditEvent.objects.filter(action="application.check_reset")
    assert {next(iter(e.before)) for e in resets} == undone
    for check in ApplicationCheck.objects.filter(application=app, item__in=undone):
        assert check.done_at is None and check.done_by_label == ""
        assert check.note.startswith("Reset: the applicant changed")


def test_approval_then_needs_the_check_again(vetted):
    app, client, url = vetted
    client.patch(url, {"legal_name": "Someone Else Ltd"}, format="json")
    pool = PoolFactory(region=app.preferred_region)
    operator = OperatorFactory()
    response = APIClient()
    response.force_authenticate(operator)
    answer = response.post(f"/api/v1/operator/applications/{app.pk}/decision",
                           {"decision": "approve", "reason": "fits", "pool": pool.pk},
                           format="json")
    assert answer.status_code == 422
    assert answer.json()["error"]["details"]["missing"] == [IDENTITY]


def test_the_portal_form_undoes_it_too(vetted, redis_client):
    from tests.portal.conftest import portal_client

    app, _client, _url = vetted
    owner = app.org.memberships.get().user
    PoolFactory(region=app.preferred_region)
    answers = {name: getattr(app, name) for name in (
        "website", "country", "contact_name", "contact_email", "use_case",
        "use_case_description", "expected_peak_tps", "expected_daily_tokens",
        "latency_sensitivity", "preferred_region")}
    response = portal_client(owner).post(
        f"/portal/o/{app.org.slug}/application/",
        {**answers, "legal_name": "Someone Else Ltd", "response": "renamed"})
    assert response.status_code == 302
    assert _ticked(app) == {CONTACT, USE_CASE}
