from datetime import timedelta

import pytest
from django.utils import timezone

from orgs.models import OrgStatus
from rollout.applications import application_check_set, application_decide, application_note_add
from rollout.models import Application, ApplicationState, CheckItem, Decision
from tests.factories import OperatorFactory, PoolFactory
from tests.portal.conftest import portal_client

pytestmark = pytest.mark.django_db

ANSWERS = {
    "legal_name": "Alpha GmbH", "website": "https://alpha.test", "country": "DE",
    "contact_name": "Ada", "contact_email": "ada@alpha.test", "use_case": "voice",
    "use_case_description": "Phone support agent.", "expected_peak_tps": "400",
    "expected_daily_tokens": "5000000", "latency_sensitivity": "realtime",
    "preferred_region": "eu-west",
}


@pytest.fixture
def applied(orgs):
    # The form offers the regions pools serve (a standard pool: no fast pool to queue in).
    PoolFactory(region="eu-west", tier="standard")
    a, b = orgs
    for side in (a, b):
        side.org.status = OrgStatus.APPLIED
        side.org.save()
    return a, b


def _apply(client, slug, **changes):
    return client.post(f"/portal/o/{slug}/application/", {**ANSWERS, **changes})


def test_owner_applies_and_status_shows_the_checklist_without_notes(applied):
    a, _ = applied
    page = a.client.get(f"/portal/o/{a.org.slug}/").content.decode()
    assert "Fill in the application" in page
    assert _apply(a.client, a.org.slug).status_code == 302
    app = Application.objects.get(org=a.org)
    operator = OperatorFactory()
    application_check_set(application=app, item=CheckItem.IDENTITY_VERIFIED, done=True,
                          actor=operator, note="passport looked fine")
    application_note_add(application=app, body="internal: call them", actor=operator)
    page = a.client.get(f"/portal/o/{a.org.slug}/").content.decode()
    assert 'data-check="identity_verified" class="done"' in page
    assert 'data-check="contact_reachable" class=""' in page
    assert "passport looked fine" not in page and "internal: call them" not in page


def test_invalid_answers_are_shown_by_field_and_nothing_is_written(applied):
    a, _ = applied
    response = _apply(a.client, a.org.slug, country="Germany", website="not a url",
                      expected_peak_tps="0")
    assert response.status_code == 400
    form = response.context["form"]
    assert set(form.errors) >= {"country", "website", "expected_peak_tps"}, form.errors
    assert not Application.objects.filter(org=a.org).exists()


def test_country_and_region_are_choices(applied):
    a, _ = applied
    form = a.client.get(f"/portal/o/{a.org.slug}/application/").context["form"]
    assert ("DE", "Germany") in form.fields["country"].choices
    assert form.fields["preferred_region"].choices == [("eu-west", "eu-west")]
    response = _apply(a.client, a.org.slug, country="de", preferred_region="mars-1")
    assert response.status_code == 400
    assert set(response.context["form"].errors) == {"country", "preferred_region"}
    assert not Application.objects.filter(org=a.org).exists()


def test_viewer_cannot_apply(applied, viewer):
    a, _ = applied
    assert _apply(portal_client(viewer), a.org.slug).status_code == 403
    assert not Application.objects.filter(org=a.org).exists()


def test_info_requested_application_is_updated_and_goes_back_to_review(applied):
    a, _ = applied
    _apply(a.client, a.org.slug)
    app = Application.objects.get(org=a.org)
    application_decide(application=app, decision=Decision.REQUEST_INFO, actor=OperatorFactory(),
                       reason="need the website", shared_reason="Which website do you run?")
    page = a.client.get(f"/portal/o/{a.org.slug}/application/").content.decode()
    assert "Which website do you run?" in page and "Alpha GmbH" in page
    response = _apply(a.client, a.org.slug, website="https://alpha-voice.test",
                      response="It is alpha-voice.test")
    assert response.status_code == 302
    app.refresh_from_db()
    assert app.state == ApplicationState.IN_REVIEW
    assert app.website == "https://alpha-voice.test"


def test_reapplying_inside_the_cooling_off_shows_the_services_message(applied):
    a, _ = applied
    _apply(a.client, a.org.slug)
    app = Application.objects.get(org=a.org)
    application_decide(application=app, decision=Decision.REJECT, actor=OperatorFactory(),
                       reason="no")
    assert "Apply again" in a.client.get(f"/portal/o/{a.org.slug}/").content.decode()
    response = _apply(a.client, a.org.slug)
    assert response.status_code == 409
    assert "may apply again from" in response.content.decode()
    assert Application.objects.filter(org=a.org).count() == 1
    Application.objects.filter(pk=app.pk).update(decided_at=timezone.now() - timedelta(days=400))
    assert _apply(a.client, a.org.slug).status_code == 302
    a.org.refresh_from_db()
    assert a.org.status == OrgStatus.APPLIED


def test_approved_org_sees_its_waitlist_position(applied):
    a, _ = applied
    PoolFactory(region="eu-west", tier="fast")
    _apply(a.client, a.org.slug)
    app = Application.objects.get(org=a.org)
    operator = OperatorFactory()
    for item in (CheckItem.IDENTITY_VERIFIED, CheckItem.USE_CASE_ACCEPTABLE,
                 CheckItem.CONTACT_REACHABLE):
        application_check_set(application=app, item=item, done=True, actor=operator)
    application_decide(application=app, decision=Decision.APPROVE, actor=operator, reason="ok")
    page = a.client.get(f"/portal/o/{a.org.slug}/").content.decode()
    assert 'data-field="position">1 <small>of 1' in page
    assert "not yet scheduled" in page
