"""PLACEHOLDER replaced by the admission engine work (issue 3)."""


def limits_publish_org_later(*, org_id: int) -> None:
    pass
