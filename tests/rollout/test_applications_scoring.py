"""The priority score: use case and latency first, demand fit, ties to the earliest."""

from datetime import timedelta

import pytest
from django.utils import timezone

from orgs.models import AuditEvent
from rollout.applications import application_score_override
from rollout.models import Application
from rollout.scoring import demand_fit_points, score_application
from rollout.waitlist import waitlist_queue
from sluice.errors import DomainError
from tests.factories import PoolFactory
from tests.waitlist import application_data, approved_application


def _score(**overrides) -> int:
    app = Application(**application_data(**overrides))
    return score_application(application=app, reference_tps=10_000).score


def test_use_cases_rank_voice_and_agents_over_chat_and_batch_last():
    scores = {uc: _score(use_case=uc, latency_sensitivity="interactive")
              for uc in ("voice", "agents", "coding", "chat", "other", "batch")}
    assert scores["voice"] == scores["agents"] > scores["coding"] > scores["chat"]
    assert scores["chat"] > scores["other"] > scores["batch"]
    assert min(scores.values()) == scores["batch"]


def test_latency_sensitivity_orders_within_a_use_case():
    ranked = [_score(latency_sensitivity=ls) for ls in ("realtime", "interactive", "tolerant",
                                                        "none")]
    assert ranked == sorted(ranked, reverse=True) and len(set(ranked)) == 4


@pytest.mark.parametrize(("peak", "points"), [(100, 20), (2_500, 20), (4_000, 10),
                                              (10_000, 0), (15_000, -10), (50_000, -30)])
def test_demand_that_fits_counts_for_and_far_beyond_counts_against(peak, points):
    assert demand_fit_points(expected_peak_tps=peak, reference_tps=10_000) == points


def test_breakdown_shows_its_inputs():
    app = Application(**application_data(use_case="agents", latency_sensitivity="tolerant",
                                         expected_peak_tps=30_000))
    b = score_application(application=app, reference_tps=10_000)
    assert (b.use_case_points, b.latency_points, b.demand_fit_points, b.score) == (50, 5, -30, 25)
    assert b.reference_tps == 10_000 and b.override is None


@pytest.mark.django_db
def test_queue_orders_by_score_then_earliest_application(operator):
    pool = PoolFactory(region="us-east")
    batch = approved_application(operator, pool, "Batchy", use_case="batch",
                                 latency_sensitivity="none")
    chat_late = approved_application(operator, pool, "Chat late", use_case="chat")
    chat_early = approved_application(operator, pool, "Chat early", use_case="chat")
    Application.objects.filter(pk=chat_early.pk).update(
        submitted_at=timezone.now() - timedelta(days=3))
    voice = approved_application(operator, pool, "Voicey", use_case="voice")
    names = [e.application.org.name for e in waitlist_queue(pool=pool)]
    assert names == ["Voicey", "Chat early", "Chat late", "Batchy"]
    assert [e.position for e in waitlist_queue(pool=pool)] == [1, 2, 3, 4]
    assert {voice.pk, batch.pk, chat_late.pk} <= {e.application.pk for e in waitlist_queue(
        pool=pool)}


@pytest.mark.django_db
def test_operator_override_needs_a_reason_and_moves_the_org(operator):
    pool = PoolFactory(region="us-east")
    approved_application(operator, pool, "Voicey", use_case="voice")
    batch = approved_application(operator, pool, "Batchy", use_case="batch",
                                 latency_sensitivity="none")
    with pytest.raises(DomainError) as exc:
        application_score_override(application=batch, score=500, reason=" ", actor=operator)
    assert exc.value.code == "reason_required"
    application_score_override(application=batch, score=500, reason="strategic partner",
                               actor=operator)
    first = waitlist_queue(pool=pool)[0]
    assert first.application.org.name == "Batchy"
    assert (first.breakdown.score, first.breakdown.override_reason) == (500,
                                                                        "strategic partner")
    assert AuditEvent.objects.filter(action="application.score_override",
                                     reason="strategic partner").count() == 1
    application_score_override(application=batch, score=None, reason="partnership ended",
                               actor=operator)
    assert waitlist_queue(pool=pool)[0].application.org.name == "Voicey"
