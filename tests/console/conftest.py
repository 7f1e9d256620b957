import pytest
from django.contrib.auth.models import Group, Permission
from django.test import Client

from console.permissions import groups_sync
from tests.factories import UserFactory
from tests.gateway.conftest import stack, stack_factory  # noqa: F401 - the gateway stack, for demo_traffic
from tests.totp import console_client


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
