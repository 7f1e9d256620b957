"""How services hold transactions: an entry point opens its own; a service it calls joins it.

- Entry points (what views, admin actions, tasks and commands call) are
  `@transaction.atomic(durable=True)`. When one returns, its writes are committed and its
  after-commit work (Redis publish, email, Stripe) is on its way. Durable makes a mistaken
  nesting fail loudly instead of silently widening someone else's transaction, its locks held
  and its side effects postponed until that one commits.
- A service that another service (or the admin's form, which Django runs inside its own
  transaction) also calls is marked `@nestable`: `org_admit(...)` is the entry point,
  `org_admit.nested(...)` the same service inside the caller's transaction.
- A helper that only ever runs inside a caller's transaction is `@nested_atomic`.

The nested form checks that a transaction is open: outside one, its row locks would be released
by the statement that took them and its writes would commit one by one. It runs as
`atomic(savepoint=False)`: no savepoint to pay for, and an exception leaving it marks the whole
transaction for rollback, so a caller cannot catch a refusal and commit half of the writes. A
caller that carries on after a refusal opens its own savepoint around the call
(`with transaction.atomic():`), as `applications_decide_bulk` does for each application.

Django's TestCase marks its own atomic blocks, so a durable entry point still runs inside a
test's transaction (pytest-django's `db` fixture).
"""

from collections.abc import Callable
from functools import wraps
from typing import TypeVar

from django.db import transaction
from django.db.transaction import TransactionManagementError

F = TypeVar("F", bound=Callable)


def nested_atomic(func: F) -> F:
    @wraps(func)
    def inside_callers_transaction(*args, **kwargs):
        if not transaction.get_connection().in_atomic_block:
            raise TransactionManagementError(
                f"{func.__module__}.{func.__qualname__} runs inside its caller's transaction.")
        with transaction.atomic(savepoint=False):
            return func(*args, **kwargs)

    return inside_callers_transaction


def nestable(entry: F) -> F:
    """Give an `@transaction.atomic(durable=True)` entry point its `.nested` form."""
    entry.nested = nested_atomic(entry.__wrapped__)
    return entry
