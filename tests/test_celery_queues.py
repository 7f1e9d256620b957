"""Celery queues: every task routed to one of the declared queues on purpose, the hot path's
publish alone on its own, and a worker started without -Q consuming all of them."""

from django.conf import settings

from config.celery import app

QUEUES = {queue.name for queue in settings.CELERY_TASK_QUEUES}


def _tasks() -> list[str]:
    app.loader.import_default_modules()
    return sorted(name for name in app.tasks if not name.startswith("celery."))


def _queue(name: str) -> str:
    return app.amqp.router.route({}, name)["queue"].name


def test_every_task_is_routed_to_a_declared_queue_by_a_route_of_its_own():
    tasks = _tasks()
    assert len(tasks) >= 20
    for name in tasks:
        # Matched by CELERY_TASK_ROUTES, not left to the default queue by accident.
        assert any(route(name) for route in app.amqp.router.routes), name
        assert _queue(name) in QUEUES, name


def test_the_limit_publish_has_a_queue_to_itself():
    """What the hot path must learn within a second: limits, and gateway tokens revoked; and
    the slots and bucket shares of expired leases, freed within seconds."""
    assert {name for name in _tasks() if _queue(name) == "limits"} == {
        "quotas.tasks.limits_publish_org", "quotas.tasks.limits_publish_pool",
        "quotas.tasks.gateway_tokens_publish_task", "metering.tasks.leases_sweep"}


def test_email_stripe_and_webhooks_wait_on_their_own_queues():
    assert _queue("sluice.tasks.email_deliver") == "email"
    assert _queue("billing.tasks.outbox_deliver_task") == "billing"
    assert _queue("billing.tasks.stripe_event_process_task") == "billing"
    assert _queue("webhooks.tasks.webhook_deliver_task") == "webhooks"
    assert _queue("metering.tasks.usage_partitions_maintain") == "maintenance"
    assert _queue("rollout.tasks.waves_advance") == "maintenance"


def test_a_worker_without_q_consumes_every_queue():
    assert set(app.amqp.queues.consume_from) == QUEUES
    assert settings.CELERY_TASK_DEFAULT_QUEUE in QUEUES
