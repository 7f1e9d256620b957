"""What happens after a commit that changed an organization or its limits.

One explicit place instead of signals: the admission engine learns the new state (so a suspension
stops traffic within a second), and people get the emails the change calls for. Both run only
after the transaction commits, never inside it.
"""

from django.db import transaction


def org_changed_on_commit(*, org_id: int, action: str) -> None:
    from quotas.limiter.sync import limits_publish_org_later

    limits_publish_org_later(org_id=org_id)


def limits_changed_on_commit(*, org_id: int) -> None:
    from quotas.limiter.sync import limits_publish_org_later

    limits_publish_org_later(org_id=org_id)


def on_commit(func, /, **kwargs) -> None:
    transaction.on_commit(lambda: func(**kwargs))
