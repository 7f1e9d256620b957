"""The house lock order (quotas/services.py docstring): the pool, then organizations by id, then
rows that belong to one organization. A wave opening holds the pool and its candidate orgs, then
takes each admitted org's application; a checklist tick on one of those applications (an
operator, or Stripe's checkout webhook) must wait for the org first too. Taken the other way
round (application, then org) the two wait on each other until PostgreSQL kills one of them."""

import threading

import pytest
from django.db import connection

from orgs.models import Organization, OrgStatus
from rollout.applications import application_check_set
from rollout.models import CheckItem, RolloutWave
from rollout.waves import wave_open
from tests.factories import PoolFactory, RolloutWaveFactory
from tests.waitlist import approved_application

ORGS = 8


@pytest.mark.django_db(transaction=True)
def test_a_wave_opening_while_its_orgs_checklists_are_ticked_does_not_deadlock(operator):
    pool = PoolFactory(region="us-east", capacity_tps=0)
    apps = [approved_application(operator, pool, f"Org {i}") for i in range(ORGS)]
    wave = RolloutWaveFactory(pool=pool, capacity_tps=ORGS * 1_000, guaranteed_tps=500,
                              max_orgs=ORGS)
    barrier, opened, errors = threading.Barrier(2), threading.Event(), []

    def open_wave() -> None:
        try:
            barrier.wait()
            wave_open(wave=wave, actor="celery:wave_open")
        except Exception as exc:  # collected and asserted on below
            errors.append(exc)
        finally:
            opened.set()
            connection.close()

    def tick_until_opened() -> None:
        # Newest application first: against the wave's primary-key order, so that without a
        # shared lock order the two transactions cross.
        try:
            barrier.wait()
            done = True
            while not opened.is_set():
                for app in reversed(apps):
                    application_check_set(application=app, actor="stripe", done=done,
                                          item=CheckItem.PAYMENT_METHOD_ON_FILE)
                done = not done
        except Exception as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=open_wave), threading.Thread(target=tick_until_opened)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert errors == []
    assert RolloutWave.objects.get(pk=wave.pk).admitted_count == ORGS
    assert set(Organization.objects.filter(pk__in=[a.org_id for a in apps])
               .values_list("status", flat=True)) == {OrgStatus.ACTIVE}
