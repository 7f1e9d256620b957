import pytest
from django.contrib.auth.models import Group, Permission
from django.test import Client

from console.permissions import groups_sync
from tests.factories import PASSWORD, UserFactory
from tests.totp import totp_code, totp_device_for


def console_client(user) -> Client:
    """A client signed in to the console the real way: password plus a TOTP code."""
    client = Client()
    device = totp_device_for(user)
    response = client.post("/admin/login/", {"username": user.username, "password": PASSWORD,
                                              "otp_token": totp_code(device)})
    assert response.status_code == 302, response.content.decode()[:2000]
    return client


def _staff_in(group: str):
    # Transactional tests (the browser suite) flush the groups the migration made.
    groups_sync(group_model=Group, permission_model=Permission)
    user = UserFactory(is_staff=True)
    user.groups.add(Group.objects.get(name=group))
    return user


@pytest.fixture
def support_user(db, redis_client):
    return _staff_in("support")


@pytest.fixture
def operator_user(db, redis_client):
    return _staff_in("operator")


@pytest.fixture
def support_console(support_user) -> Client:
    return console_client(support_user)


@pytest.fixture
def operator_console(operator_user) -> Client:
    return console_client(operator_user)
