"""Every page that creates a secret (a gateway token in the raw admin and in the console, an API
key, an admin key, a webhook signing secret) shows it once, in the body of the response to the
POST: never in a Django message (their cookie is signed, not encrypted; their session fallback
is a database row), a Set-Cookie header, a URL or a log line, and no cache keeps the page."""

import logging
import re

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.messages.storage.cookie import CookieStorage
from django.test import RequestFactory

from orgs.models import AuditEvent
from quotas.models import GatewayToken
from sluice.secrets import secret_matches
from tests.portal.conftest import verified
from tests.totp import console_client

pytestmark = pytest.mark.django_db


def _messages_stored(client, response) -> list[str]:
    """The text of every message left for the next page, from the cookie and the session."""
    texts = []
    cookie = response.cookies.get(CookieStorage.cookie_name)
    if cookie is not None and cookie.value:
        storage = CookieStorage(RequestFactory().get("/"))
        texts += [str(m) for m in storage._decode(cookie.value) or []]
    texts += [str(m) for m in client.session.get("_messages", [])]
    return texts


def assert_shown_once_in_body(client, response, secret: str, caplog) -> None:
    assert response.status_code == 201
    assert response.content.decode().count(secret) == 1
    assert secret not in response.get("Location", "")
    assert all(secret not in str(morsel) for morsel in response.cookies.values())
    assert all(secret not in text for text in _messages_stored(client, response))
    assert "no-store" in response.get("Cache-Control", "")
    assert all(secret not in record.getMessage() for record in caplog.records)


@pytest.fixture
def operator_console(operator):
    return console_client(operator)


@pytest.fixture
def owner(two_orgs, redis_client):
    a, _ = two_orgs
    verified(a.owner)
    a.client.force_login(a.owner)
    return a


def test_raw_admin_shows_a_new_gateway_token_in_the_page_only(operator_console, caplog):
    caplog.set_level(logging.DEBUG)
    response = operator_console.post("/admin/quotas/gatewaytoken/add/", {"name": "edge-eu"})
    token = GatewayToken.objects.get(name="edge-eu")
    pattern = re.compile(rf"gw_{token.lookup}_[A-Za-z0-9_-]+")
    wherever = [response.content.decode(), *_messages_stored(operator_console, response)]
    secret = next(m.group() for text in wherever for m in [pattern.search(text)] if m)
    assert secret_matches(secret, token.digest)
    assert_shown_once_in_body(operator_console, response, secret, caplog)
    listing = operator_console.get("/admin/quotas/gatewaytoken/").content.decode()
    assert secret not in listing
    # Nor in the admin's own history or the audit log.
    assert all(secret not in f"{e.object_repr} {e.change_message}" for e in LogEntry.objects.all())
    assert all(secret not in str(e.after) for e in AuditEvent.objects.all())


def test_console_shows_a_new_gateway_token_in_the_page_only(operator_console, caplog):
    caplog.set_level(logging.DEBUG)
    response = operator_console.post("/admin/console/gateway-tokens/new/", {"name": "edge 2"})
    assert_shown_once_in_body(operator_console, response, response.context["created"]["secret"],
                              caplog)


@pytest.mark.parametrize(("path", "data"), [
    ("keys/new/", {"name": "prod"}),
    ("admin-keys/", {"name": "finance"}),
    ("webhooks/", {"url": "https://hooks.example.com/sluice", "event_types": ["invoice.issued"]}),
])
def test_portal_shows_a_new_secret_in_the_page_only(owner, path, data, caplog):
    caplog.set_level(logging.DEBUG)
    response = owner.client.post(f"/portal/o/{owner.org.slug}/{path}", data)
    assert_shown_once_in_body(owner.client, response, response.context["secret"], caplog)
