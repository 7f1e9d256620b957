"""seed_demo --credentials: the key the `dev.py run` banner prints works, and survives a rerun."""

import stat

import pytest

from console.management.commands.seed_demo import quickstart_credentials
from orgs.models import ApiKey
from orgs.services import api_key_revoke
from quotas.models import GatewayToken
from sluice.secrets import secret_digest
from tests.factories import OrganizationFactory

pytestmark = pytest.mark.django_db


def test_credentials_are_kept_private_and_made_again_only_when_unknown(tmp_path):
    org = OrganizationFactory()
    path = tmp_path / "quickstart.json"
    first = quickstart_credentials(path=path, org=org)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    key = ApiKey.objects.get(org=org)
    assert key.digest == secret_digest(first["api_key"])
    assert GatewayToken.objects.count() == 1
    assert quickstart_credentials(path=path, org=org) == first  # a rerun keeps them
    api_key_revoke(key=key, actor="test")
    again = quickstart_credentials(path=path, org=org)
    assert again["api_key"] != first["api_key"]
    assert again["gateway_token"] == first["gateway_token"]
