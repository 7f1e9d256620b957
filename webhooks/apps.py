from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    name = "webhooks"
    verbose_name = "Webhooks"

    def ready(self) -> None:
        from billing import events as billing_events
        from metering import events as metering_events
        from orgs import events as orgs_events
        from quotas import events as quotas_events
        from rollout import events as rollout_events
        from webhooks import receivers

        orgs_events.org_transitioned.subscribe(receivers.org_transitioned_received)
        metering_events.usage_recorded.subscribe(receivers.usage_recorded_received)
        metering_events.refusals_drained.subscribe(receivers.refusals_drained_received)
        rollout_events.wave_opened.subscribe(receivers.wave_opened_received)
        billing_events.invoice_issued.subscribe(receivers.invoice_issued_received)
        billing_events.invoice_paid.subscribe(receivers.invoice_paid_received)
        billing_events.invoice_payment_failed.subscribe(
            receivers.invoice_payment_failed_received)
        billing_events.spend_threshold_crossed.subscribe(
            receivers.spend_threshold_crossed_received)
        billing_events.booking_confirmed.subscribe(receivers.booking_confirmed_received)
        billing_events.booking_cancelled.subscribe(receivers.booking_cancelled_received)
        quotas_events.booking_started.subscribe(receivers.booking_started_received)
        quotas_events.booking_ended.subscribe(receivers.booking_ended_received)
