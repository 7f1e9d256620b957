import pytest

from billing import receivers as billing_receivers
from orgs import events as orgs_events
from quotas import receivers as quotas_receivers
from rollout import receivers as rollout_receivers
from sluice.events import Event
from webhooks import receivers as webhooks_receivers


def test_receivers_run_in_order_and_their_errors_reach_the_emitter():
    event = Event("tests.happened", payload=("x",))
    seen = []
    event.subscribe(lambda *, x: seen.append(("first", x)))

    def refuse(*, x):
        raise ValueError(x)

    event.subscribe(refuse)
    event.subscribe(refuse)  # idempotent
    with pytest.raises(ValueError):
        event.emit(x=1)
    assert seen == [("first", 1)]
    assert len(event.receivers) == 2


def test_the_payload_is_the_declared_one():
    event = Event("tests.happened", payload=("x",))
    with pytest.raises(TypeError):
        event.emit(x=1, y=2)
    with pytest.raises(TypeError):
        event.emit()


def test_higher_apps_subscribe_to_what_orgs_announces():
    assert orgs_events.org_transitioned.receivers == [
        quotas_receivers.org_transitioned_received, rollout_receivers.org_transitioned_received,
        billing_receivers.org_transitioned_received, webhooks_receivers.org_transitioned_received]
    assert orgs_events.api_keys_changed.receivers == [quotas_receivers.api_keys_changed_received]
    assert orgs_events.org_service_stopping.receivers == [
        quotas_receivers.org_service_stopping_received]
    assert orgs_events.org_transition_requested.receivers == [
        rollout_receivers.org_transition_requested_received]
    assert orgs_events.org_contact_reading.receivers == [
        rollout_receivers.org_contact_reading_received]


def test_higher_apps_subscribe_to_what_quotas_announces():
    from admission import receivers as admission_receivers
    from metering import receivers as metering_receivers
    from quotas import events as quotas_events

    assert quotas_events.limits_publishing.receivers == [
        admission_receivers.queue_defaults_publish, billing_receivers.limits_publishing_received]
    assert quotas_events.day_usage_reading.receivers == [
        metering_receivers.day_usage_reading_received]
    assert quotas_events.capacity_freed.receivers == [
        rollout_receivers.capacity_freed_received]


def test_webhooks_subscribe_to_what_rollout_announces():
    from rollout import events as rollout_events

    assert rollout_events.wave_opened.receivers == [webhooks_receivers.wave_opened_received]


def test_higher_apps_subscribe_to_what_metering_announces():
    from metering import events as metering_events

    assert metering_events.usage_recorded.receivers == [
        billing_receivers.usage_recorded_received, webhooks_receivers.usage_recorded_received]
    assert metering_events.usage_month_retiring.receivers == [
        billing_receivers.usage_month_retiring_received]
    assert metering_events.usage_days_compacting.receivers == [
        billing_receivers.usage_days_compacting_received]
    assert metering_events.refusals_drained.receivers == [
        webhooks_receivers.refusals_drained_received]


def test_webhooks_subscribe_to_what_billing_announces():
    from billing import events as billing_events

    assert billing_events.invoice_issued.receivers == [
        webhooks_receivers.invoice_issued_received]
    assert billing_events.invoice_paid.receivers == [webhooks_receivers.invoice_paid_received]
    assert billing_events.invoice_payment_failed.receivers == [
        webhooks_receivers.invoice_payment_failed_received]
    assert billing_events.spend_threshold_crossed.receivers == [
        webhooks_receivers.spend_threshold_crossed_received]
