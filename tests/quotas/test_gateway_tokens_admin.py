"""Gateway tokens in the admin: created through the service (secret shown once), revoked by an
action that calls the revoke service."""

import pytest

from orgs.models import AuditEvent
from quotas.models import GatewayToken
from sluice.secrets import secret_matches
from tests.totp import console_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(operator):
    return console_client(operator)


def test_admin_creates_a_token_and_shows_the_secret_once(admin_client):
    r = admin_client.post("/admin/quotas/gatewaytoken/add/", {"name": "edge-eu"})
    token = GatewayToken.objects.get()
    plaintext = r.context["secret"]  # the page's body only (tests/sluice/test_secrets_shown_once)
    assert secret_matches(plaintext, token.digest)
    assert plaintext not in str(GatewayToken.objects.values().get())
    assert AuditEvent.objects.filter(action="gateway_token.create").count() == 1


def test_admin_revoke_action(admin_client):
    from quotas.hook.gateway_tokens import gateway_token_create

    token, _ = gateway_token_create(name="edge", actor="test")
    admin_client.post("/admin/quotas/gatewaytoken/", {"action": "revoke",
                                                      "_selected_action": [token.pk]})
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert AuditEvent.objects.filter(action="gateway_token.revoke").count() == 1
