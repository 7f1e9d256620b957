"""Side effects coalesced per transaction: one call after the commit, with every item collected.

`on_commit_collect(flush, item)` adds `item` to a batch that `flush(items)` receives once, after
the current transaction commits, however many times the transaction collects it (an org
admitted and granted an allocation in one wave is published once). Outside a transaction,
`flush({item})` runs at once, as `transaction.on_commit` would.

How: each call registers a small `transaction.on_commit` trigger, so Django's rules decide
which calls survive; after the commit, the first trigger that runs flushes the whole batch and
the others find it done.

Savepoints. A call inside a savepoint that rolls back loses its trigger with it. If no trigger
of the batch survives (every call was rolled back), the batch is dropped and the next call
starts a new one: rolled-back items are never flushed on their own. An item whose call was
rolled back while another call of the same batch survives is flushed with the rest: a flush
must therefore be idempotent and act on committed state (a publish re-reads the database), so
that costs a redundant call, never a wrong one.
"""

import weakref
from collections.abc import Callable, Hashable

from django.db import transaction

Flush = Callable[[set], None]


class _Batch:
    def __init__(self, flush: Flush) -> None:
        self.flush, self.items, self.done = flush, set(), False


class _Trigger:
    def __init__(self, batch: _Batch) -> None:
        self.batch = batch

    def __call__(self) -> None:
        if not self.batch.done:
            self.batch.done = True
            self.batch.flush(self.batch.items)


# connection -> {flush: its open batch}. Django's connections are per thread, and so is this.
_batches: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _open(connection, batch: _Batch | None) -> bool:
    # Django keeps what it will run after the commit in `run_on_commit`; a rollback removes
    # the triggers it made void.
    return batch is not None and not batch.done and any(
        isinstance(f, _Trigger) and f.batch is batch for _, f, _ in connection.run_on_commit)


def on_commit_collect(flush: Flush, item: Hashable, *, using: str | None = None) -> None:
    """`flush` names the batch: pass the same function each time (not a new lambda)."""
    connection = transaction.get_connection(using)
    if not connection.in_atomic_block:
        transaction.on_commit(lambda: flush({item}), using=using)
        return
    batches = _batches.setdefault(connection, {})
    batch = batches.get(flush)
    if not _open(connection, batch):
        batch = batches[flush] = _Batch(flush)
    batch.items.add(item)
    transaction.on_commit(_Trigger(batch), using=using)
