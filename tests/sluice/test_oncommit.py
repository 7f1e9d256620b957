"""on_commit_collect: one flush per commit with every item collected, and rollbacks respected.
Real transactions on PostgreSQL (transaction=True: these tests commit)."""

import pytest
from django.db import transaction

from sluice.oncommit import on_commit_collect

pytestmark = pytest.mark.django_db(transaction=True)


class Rollback(Exception):
    pass


@pytest.fixture
def flushed() -> list[set]:
    return []


@pytest.fixture
def flush(flushed):
    return flushed.append  # one function: it names the batch


def test_a_transaction_flushes_once_after_commit_with_each_item_once(flush, flushed):
    with transaction.atomic():
        for item in ("a", "b", "a"):
            on_commit_collect(flush, item)
        assert flushed == []  # nothing before the commit
    assert flushed == [{"a", "b"}]


def test_outside_a_transaction_the_flush_runs_at_once(flush, flushed):
    on_commit_collect(flush, "a")
    assert flushed == [{"a"}]


def test_each_commit_and_each_flush_function_has_its_own_batch(flush, flushed):
    other: list[set] = []
    with transaction.atomic():
        on_commit_collect(flush, "a")
        on_commit_collect(other.append, "x")
    with transaction.atomic():
        on_commit_collect(flush, "b")
    assert (flushed, other) == ([{"a"}, {"b"}], [{"x"}])


def test_a_rolled_back_transaction_flushes_nothing_ever(flush, flushed):
    with pytest.raises(Rollback), transaction.atomic():
        on_commit_collect(flush, "lost")
        raise Rollback
    with transaction.atomic():
        on_commit_collect(flush, "b")
    assert flushed == [{"b"}]


def test_items_of_a_rolled_back_savepoint_alone_are_dropped(flush, flushed):
    with transaction.atomic():
        with pytest.raises(Rollback), transaction.atomic():
            on_commit_collect(flush, "lost")
            raise Rollback
        on_commit_collect(flush, "b")
    assert flushed == [{"b"}]


def test_a_rolled_back_savepoint_inside_a_surviving_batch_is_flushed_with_it(flush, flushed):
    """Documented: a redundant flush, never a missing one (flushes act on committed state)."""
    with transaction.atomic():
        on_commit_collect(flush, "a")
        with pytest.raises(Rollback), transaction.atomic():
            on_commit_collect(flush, "b")
            raise Rollback
    assert flushed == [{"a", "b"}]


def test_a_released_savepoint_joins_the_outer_batch(flush, flushed):
    with transaction.atomic():
        with transaction.atomic():
            on_commit_collect(flush, "a")
        on_commit_collect(flush, "b")
    assert flushed == [{"a", "b"}]


@pytest.mark.django_db(transaction=False)
def test_each_captured_window_in_a_test_flushes_what_it_collected(
        flush, flushed, django_capture_on_commit_callbacks):
    on_commit_collect(flush, "setup")  # never run: the test's transaction never commits
    with django_capture_on_commit_callbacks(execute=True):
        on_commit_collect(flush, "a")
    with django_capture_on_commit_callbacks(execute=True):
        on_commit_collect(flush, "b")
    # The first window also flushes what was collected before it in the same transaction.
    assert flushed == [{"setup", "a"}, {"b"}]
