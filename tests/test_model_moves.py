"""A database from before quotas was split (and the applications left orgs), with data in it,
migrated forward: every row is where it was, operators keep their access (the console's groups,
a group of the operators' own, a permission given to one user), emails queued under the old
kinds are still sent, and audit rows written under the old labels still show on the pages that
show them."""

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone
from rest_framework.test import APIClient

from console.permissions import OPERATOR_PERMISSIONS
from metering.models import UsageHourly
from orgs.models import AuditEvent
from rollout.models import Application, RolloutWave
from sluice.models import OutboundEmail
from tests.factories import UserFactory
from tests.totp import console_client

# Unapplying the new apps' first migrations unapplies every migration after them (quotas 0009
# and 0010, orgs 0006, console 0004 and 0005): the database is as it was before the split.
BEFORE_THE_SPLIT = [("metering", None), ("rollout", None)]


def _migrate(targets=None):
    """Migrate to `targets` (default: the end); the models of the state reached."""
    executor = MigrationExecutor(connection)
    state = executor.migrate(targets or executor.loader.graph.leaf_nodes())
    ContentType.objects.clear_cache()
    return state.apps


def _old_label(permission: str) -> str:
    """"rollout.change_rolloutwave" as it was: "quotas.change_rolloutwave" (FORMER_LABELS)."""
    from django.apps import apps

    app_label, codename = permission.split(".")
    action, model_name = codename.split("_", 1)
    model = apps.get_model(app_label, model_name)
    former = getattr(model, "FORMER_LABELS", ())
    return f"{former[0].split('.')[0]}.{codename}" if former else permission


def _permissions(old_state, labels) -> list:
    permission = old_state.get_model("auth", "Permission")
    found = []
    for label in labels:
        app_label, codename = label.split(".")
        found.append(permission.objects.get(content_type__app_label=app_label,
                                            codename=codename))
    return found


def _populate(old_state) -> dict:
    """Rows of every moved model, written with the models as they were, and who may act."""
    organization = old_state.get_model("orgs", "Organization")
    pool_model = old_state.get_model("quotas", "CapacityPool")
    wave_model = old_state.get_model("quotas", "RolloutWave")
    application_model = old_state.get_model("orgs", "Application")
    hourly = old_state.get_model("quotas", "UsageHourly")
    audit = old_state.get_model("orgs", "AuditEvent")
    group = old_state.get_model("auth", "Group")
    user_model = old_state.get_model("auth", "User")
    email = old_state.get_model("sluice", "OutboundEmail")

    org = organization.objects.create(name="Before", slug="before", status="approved")
    pool = pool_model.objects.create(model="m-before", region="eu", tier="fast",
                                     capacity_tps=1_000)
    wave = wave_model.objects.create(
        pool=pool, name="Wave of before", opens_at=timezone.now() + timedelta(days=3),
        capacity_tps=100, max_orgs=2, guaranteed_tps=10, burst_tps=20, daily_tokens=1_000,
        max_concurrency=2)
    application = application_model.objects.create(
        org=org, state="approved", legal_name="Before GmbH", website="https://before.example",
        country="DE", contact_name="Bea", contact_email="bea@before.example", use_case="voice",
        use_case_description="calls", expected_peak_tps=10, expected_daily_tokens=1_000,
        latency_sensitivity="realtime", preferred_region="eu")
    hourly.objects.create(org=org, pool=pool, hour=timezone.now().replace(
        minute=0, second=0, microsecond=0), requests=3, input_tokens=30, output_tokens=70)
    audit.objects.create(actor_label="olga", action="wave.create", target_type="quotas.rolloutwave",
                         target_id=str(wave.pk), reason="written before the split")
    audit.objects.create(actor_label="olga", action="application.approve", org=org,
                         target_type="orgs.application", target_id=str(application.pk),
                         reason="approved before the split")
    email.objects.create(key=f"org:{org.pk}:approve:before", kind="quotas.approved",
                         params={"org_id": org.pk}, status="pending",
                         next_attempt_at=timezone.now())

    # The console's operator group as it was, with the labels of the time.
    operator_group, _ = group.objects.get_or_create(name="operator")
    operator_group.permissions.set(_permissions(old_state, {_old_label(p)
                                                            for p in OPERATOR_PERMISSIONS}))
    # A group the operators made themselves, and a permission given to one user.
    wave_managers = group.objects.create(name="wave managers")
    wave_managers.permissions.set(_permissions(old_state, ["quotas.change_rolloutwave"]))
    users = {name: UserFactory(username=name, is_staff=True)
             for name in ("olga", "wendy", "quinn")}
    user_model.objects.get(pk=users["olga"].pk).groups.add(operator_group)
    user_model.objects.get(pk=users["wendy"].pk).groups.add(wave_managers)
    user_model.objects.get(pk=users["quinn"].pk).user_permissions.set(
        _permissions(old_state, ["quotas.change_quotarequest"]))
    return {"org": org.pk, "pool": pool.pk, "wave": wave.pk, "application": application.pk,
            **{name: user.pk for name, user in users.items()}}


@pytest.mark.django_db(transaction=True)
def test_a_populated_database_migrates_through_the_split(redis_client):
    try:
        ids = _populate(_migrate(BEFORE_THE_SPLIT))
    finally:
        _migrate()

    # The rows, in their tables, through the models' new apps.
    wave = RolloutWave.objects.get(pk=ids["wave"])
    assert (wave.name, wave.pool_id) == ("Wave of before", ids["pool"])
    assert Application.objects.get(pk=ids["application"]).contact_name == "Bea"
    assert UsageHourly.objects.get(org_id=ids["org"]).output_tokens == 70
    assert OutboundEmail.objects.get(key__startswith=f"org:{ids['org']}:").kind == \
        "rollout.approved"

    # One content type per model, under its new app, holding its permissions.
    for app_label, model in (("rollout", "rolloutwave"), ("rollout", "application"),
                             ("rollout", "quotarequest"), ("metering", "usageevent")):
        assert ContentType.objects.filter(model=model).get().app_label == app_label
    assert Permission.objects.filter(codename="change_rolloutwave").count() == 1

    olga, wendy, quinn = (get_user_model().objects.get(pk=ids[name])
                          for name in ("olga", "wendy", "quinn"))
    for perm in ("rollout.change_rolloutwave", "rollout.change_application",
                 "rollout.change_quotarequest", "rollout.change_pooladmission",
                 "metering.view_usageevent", "quotas.change_capacitypool"):
        assert olga.has_perm(perm), perm
    assert set(olga.groups.get().permissions.values_list("content_type__app_label", flat=True)
               ) <= {"orgs", "quotas", "metering", "rollout", "billing"}
    assert wendy.has_perm("rollout.change_rolloutwave")
    assert not wendy.has_perm("rollout.change_application")
    assert quinn.has_perm("rollout.change_quotarequest")

    # The operator still acts: the REST API checks the new labels.
    api = APIClient()
    api.force_authenticate(olga)
    r = api.post(f"/api/v1/operator/waves/{wave.pk}/close", {"reason": "after the split"},
                 format="json")
    assert r.status_code == 200, r.content

    # Old audit rows show where they did: the wave's and the application's pages, the search.
    console = console_client(olga)
    page = console.get(f"/admin/console/waves/{wave.pk}/").content.decode()
    assert "written before the split" in page and "quotas.rolloutwave" in page
    page = console.get(f"/admin/console/applications/{ids['application']}/").content.decode()
    assert "approved before the split" in page
    page = console.get("/admin/console/audit/", {"target": f"rollout.rolloutwave:{wave.pk}"}
                       ).content.decode()
    assert "written before the split" in page and "wave.close" in page
    assert AuditEvent.objects.filter(target_type="quotas.rolloutwave").count() == 1
