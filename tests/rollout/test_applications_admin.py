"""Admin pages and actions for applications and waves call the services."""

from datetime import timedelta

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.utils import timezone

import rollout.admin_applications  # noqa: F401  (registers; rollout/admin.py imports it too)
import rollout.admin_waves  # noqa: F401
from orgs.models import AuditEvent
from rollout.models import Application, PoolAdmission, RolloutWave
from tests.factories import PoolFactory, RolloutWaveFactory
from tests.totp import console_client
from tests.waitlist import applicant_org, approved_application, submit, tick_required

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(operator):
    return console_client(operator)


def test_application_pages_render_with_the_score_breakdown(admin_client, operator):
    pool = PoolFactory(region="us-east")
    app = approved_application(operator, pool, "Voicey")
    assert admin_client.get("/admin/rollout/application/?state=approved").status_code == 200
    page = admin_client.get(f"/admin/rollout/application/{app.pk}/change/").content.decode()
    assert "Position: 1" in page and "use_case_points" in page


def test_approve_action_asks_for_a_reason_then_approves_all(admin_client, operator):
    PoolFactory(region="us-east")
    apps = []
    for name in ("One", "Two"):
        apps.append(submit(*applicant_org(name)))
        tick_required(apps[-1], operator)
    form = {"action": "approve", ACTION_CHECKBOX_NAME: [a.pk for a in apps]}
    r = admin_client.post("/admin/rollout/application/", form)
    assert r.status_code == 200 and b"reason" in r.content
    assert not Application.objects.filter(state="approved").exists()
    r = admin_client.post("/admin/rollout/application/",
                          {**form, "apply": "1", "reason": "wave one cohort"})
    assert r.status_code == 302
    assert Application.objects.filter(state="approved").count() == 2
    assert AuditEvent.objects.filter(action="application.approve",
                                     reason="wave one cohort").count() == 2


def test_wave_added_in_admin_is_validated_and_created_by_the_service(admin_client):
    pool = PoolFactory(capacity_tps=1_000)
    opens = timezone.now() + timedelta(days=1)
    form = {"pool": pool.pk, "name": "GA", "opens_at_0": opens.strftime("%Y-%m-%d"),
            "opens_at_1": opens.strftime("%H:%M:%S"), "capacity_tps": 500, "max_orgs": 5,
            "guaranteed_tps": 100, "burst_tps": 99_999, "daily_tokens": 1_000_000,
            "max_concurrency": 4}
    r = admin_client.post("/admin/rollout/rolloutwave/add/", form)
    assert r.status_code == 200 and not RolloutWave.objects.exists()
    r = admin_client.post("/admin/rollout/rolloutwave/add/", {**form, "burst_tps": 200})
    assert r.status_code == 302, r.content
    wave = RolloutWave.objects.get()
    assert AuditEvent.objects.filter(action="wave.create", target_id=str(wave.pk)).exists()
    assert "Admits 0 org(s)" in admin_client.get(
        f"/admin/rollout/rolloutwave/{wave.pk}/change/").content.decode()


def test_open_action_and_auto_admission_switch(admin_client, operator):
    pool = PoolFactory(region="us-east")
    approved_application(operator, pool, "Voicey")
    wave = RolloutWaveFactory(pool=pool)
    admin_client.post("/admin/rollout/rolloutwave/",
                      {"action": "open_now", ACTION_CHECKBOX_NAME: [wave.pk]})
    wave.refresh_from_db()
    assert (wave.state, wave.admitted_count) == ("open", 1)
    r = admin_client.post("/admin/rollout/pooladmission/add/",
                          {"pool": pool.pk, "auto_admit": "on"})
    assert r.status_code == 302
    assert PoolAdmission.objects.get(pool=pool).auto_admit is True
    assert AuditEvent.objects.filter(action="pool.auto_admit_set").exists()
