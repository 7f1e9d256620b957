"""Webhook signing secrets are sealed at rest (sluice/sealing.py): the database holds no secret
in clear, deliveries still sign with it, and SLUICE_SECRET_KEY can be rotated."""

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from orgs.services.lifecycle import org_suspend
from sluice.sealing import SealBroken, seal, unseal
from tests.factories import OrganizationFactory
from tests.webhooks.test_webhooks import endpoint_for
from webhooks.delivery import webhook_deliver
from webhooks.models import SECRET_PURPOSE, DeliveryStatus, WebhookDelivery, WebhookEndpoint

OLD_KEY = "old-secret-key-" + "o" * 50
NEW_KEY = "new-secret-key-" + "n" * 50


def _stored_row(endpoint_id: int) -> str:
    """Every column of the endpoint's row, as PostgreSQL returns them."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM webhooks_webhookendpoint WHERE id = %s", [endpoint_id])
        return " ".join(map(str, cursor.fetchone()))


@pytest.mark.django_db
def test_the_database_holds_no_signing_secret_in_clear(receiver):
    endpoint = endpoint_for(OrganizationFactory(), receiver)
    secret = receiver.secret
    row = _stored_row(endpoint.pk)
    assert secret not in row and secret.removeprefix("whsec_") not in row
    assert secret[:10] in row  # the hint, and only it
    endpoint.refresh_from_db()
    assert endpoint.secret_hint == secret[:10]
    assert endpoint.signing_secret() == secret


def test_a_value_sealed_for_one_purpose_does_not_open_for_another(settings):
    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = NEW_KEY, []
    sealed = seal("whsec_abc", purpose=SECRET_PURPOSE)
    assert sealed != seal("whsec_abc", purpose=SECRET_PURPOSE)  # a fresh IV each time
    assert unseal(sealed, purpose=SECRET_PURPOSE) == "whsec_abc"
    with pytest.raises(SealBroken):
        unseal(sealed, purpose="something else")
    with pytest.raises(SealBroken):
        unseal("whsec_abc", purpose=SECRET_PURPOSE)  # a clear value is not a sealed one


def _delivery_attempted() -> WebhookDelivery:
    delivery = WebhookDelivery.objects.order_by("-pk").first()
    webhook_deliver(delivery_id=delivery.pk, now=timezone.now() + timezone.timedelta(days=1))
    delivery.refresh_from_db()
    return delivery


@pytest.mark.django_db(transaction=True)
def test_the_secret_key_rotates_with_a_fallback_and_a_reseal(receiver, settings):
    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = OLD_KEY, []
    org = OrganizationFactory()
    endpoint = endpoint_for(org, receiver)
    sealed_before = WebhookEndpoint.objects.get(pk=endpoint.pk).secret_sealed

    # Rotated without keeping the old key: nothing opens, the delivery fails and says why.
    settings.SECRET_KEY = NEW_KEY
    receiver.status = 200
    org_suspend(org=org, actor="test", reason="")  # its delivery is attempted at once
    delivery = WebhookDelivery.objects.get()
    assert delivery.status == DeliveryStatus.PENDING
    assert "secret key rotated without its fallback" in delivery.last_error
    assert receiver.received == []
    with pytest.raises(CommandError, match=f"ids {endpoint.pk}"):
        call_command("secrets_reseal")
    assert WebhookEndpoint.objects.get(pk=endpoint.pk).secret_sealed == sealed_before

    # With the old key as a fallback it opens, and the reseal moves it to the new key.
    settings.SECRET_KEY_FALLBACKS = [OLD_KEY]
    assert _delivery_attempted().status == DeliveryStatus.DELIVERED
    assert receiver.types() == ["organization.suspended"]  # signed with the same secret
    call_command("secrets_reseal")
    settings.SECRET_KEY_FALLBACKS = []
    stored = WebhookEndpoint.objects.get(pk=endpoint.pk)
    assert stored.secret_sealed != sealed_before
    assert stored.signing_secret() == receiver.secret


@pytest.mark.django_db(transaction=True)
def test_the_migration_seals_existing_secrets_and_unseals_them_backwards():
    sealed_migration, clear_migration = ("webhooks", "0002_endpoint_secret_sealed"), (
        "webhooks", "0001_initial")
    org = OrganizationFactory()
    secret = "whsec_" + "S" * 44
    executor = MigrationExecutor(connection)
    executor.migrate([clear_migration])
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO webhooks_webhookendpoint (org_id, url, description, event_types, "
                "secret, created_at) VALUES (%s, 'https://hooks.example.com/', '', "
                "ARRAY['invoice.issued'], %s, now()) RETURNING id", [org.pk, secret])
            endpoint_id = cursor.fetchone()[0]
        executor.loader.build_graph()
        executor.migrate([sealed_migration])
        assert secret not in _stored_row(endpoint_id)
        # Only the columns 0002 knows (later migrations add more).
        endpoint = WebhookEndpoint.objects.only("secret_sealed", "secret_hint").get(
            pk=endpoint_id)
        assert endpoint.signing_secret() == secret and endpoint.secret_hint == secret[:10]

        executor.loader.build_graph()
        executor.migrate([clear_migration])
        with connection.cursor() as cursor:
            cursor.execute("SELECT secret FROM webhooks_webhookendpoint WHERE id = %s",
                           [endpoint_id])
            assert cursor.fetchone()[0] == secret
    finally:
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())
