"""Every state change of the orgs domain. Views, admin actions, tasks and commands call these."""

from orgs.services.admin_keys import admin_key_create, admin_key_revoke
from orgs.services.api_keys import (
    KeySlice,
    api_key_create,
    api_key_limits_set,
    api_key_revoke,
    api_key_touch,
    org_queue_default_set,
)
from orgs.services.audit import audit_record
from orgs.services.lifecycle import (
    org_admit,
    org_approve,
    org_create,
    org_offboard,
    org_reapply,
    org_reject,
    org_rename,
    org_restore,
    org_review_start,
    org_suspend,
    org_transition,
)
from orgs.services.members import (
    invitation_accept,
    invitation_create,
    invitation_revoke,
    membership_add,
    membership_remove,
    membership_role_change,
)
from orgs.services.operator_tokens import operator_token_create, operator_token_revoke

__all__ = [
    "org_queue_default_set",
    "admin_key_create",
    "admin_key_revoke",
    "KeySlice",
    "api_key_create",
    "api_key_limits_set",
    "api_key_revoke",
    "api_key_touch",
    "audit_record",
    "invitation_accept",
    "invitation_create",
    "invitation_revoke",
    "membership_add",
    "membership_remove",
    "membership_role_change",
    "operator_token_create",
    "operator_token_revoke",
    "org_admit",
    "org_approve",
    "org_create",
    "org_offboard",
    "org_reapply",
    "org_reject",
    "org_rename",
    "org_restore",
    "org_review_start",
    "org_suspend",
    "org_transition",
]
