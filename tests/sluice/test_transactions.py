"""Entry points open their own (durable) transaction; `.nested` forms join the caller's, and only
the caller's (sluice/transactions.py)."""

from contextlib import suppress

import pytest
from django.db import transaction
from django.db.transaction import TransactionManagementError

from orgs.models import Organization
from orgs.services import org_create, org_suspend
from sluice.errors import IllegalTransition


@pytest.mark.django_db(transaction=True)
def test_an_entry_point_refuses_to_run_inside_another_transaction():
    with pytest.raises(RuntimeError, match="durable"), transaction.atomic():
        org_create(name="Nested by mistake", actor="test")
    assert not Organization.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_nested_form_refuses_to_run_without_a_callers_transaction():
    with pytest.raises(TransactionManagementError, match="caller's transaction"):
        org_create.nested(name="Autocommitted by mistake", actor="test")
    assert not Organization.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_caller_cannot_swallow_a_nested_refusal_and_commit_half_of_it():
    with pytest.raises(TransactionManagementError), transaction.atomic():
        org = org_create.nested(name="Half done", actor="test")
        with suppress(IllegalTransition):
            org_suspend.nested(org=org, actor="test")  # applied orgs cannot be suspended
        Organization.objects.count()  # the transaction is marked for rollback: no more queries
    assert not Organization.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_savepoint_around_the_nested_call_lets_the_caller_carry_on():
    with transaction.atomic():
        org = org_create.nested(name="Carries on", actor="test")
        with pytest.raises(IllegalTransition), transaction.atomic():
            org_suspend.nested(org=org, actor="test")
    assert Organization.objects.get().name == "Carries on"
