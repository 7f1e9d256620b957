"""Console roles. `support` staff read everything; `operator` staff also change lifecycle,
capacity, allocations, vetting decisions, waves, quota requests, bookings and money. Superusers have
every permission.

The groups are created by migration 0001 through `groups_sync`; a later change to these lists
ships with a migration that calls it again, depending on the migrations of every model the lists
name (earlier migrations leave out the permissions of models not made yet).
"""

from django.db.models import Q

# Views check these; templates hide the buttons of the ones a user lacks.
VIEW_ORGS = "orgs.view_organization"
VIEW_POOLS = "quotas.view_capacitypool"
VIEW_AUDIT = "orgs.view_auditevent"
CHANGE_LIFECYCLE = "orgs.change_organization"
GRANT_ALLOCATION = "quotas.add_allocation"
CHANGE_ALLOCATION = "quotas.change_allocation"
CHANGE_CAPACITY = "quotas.change_capacitypool"
VIEW_APPLICATIONS = "rollout.view_application"
DECIDE_APPLICATIONS = "rollout.change_application"
VIEW_WAVES = "rollout.view_rolloutwave"
CHANGE_WAVES = "rollout.change_rolloutwave"
VIEW_QUOTA_REQUESTS = "rollout.view_quotarequest"
DECIDE_QUOTA_REQUESTS = "rollout.change_quotarequest"
CHANGE_POOL_ADMISSION = "rollout.change_pooladmission"
VIEW_PRICES = "billing.view_priceversion"
ADD_PRICE = "billing.add_priceversion"
VIEW_BILLING_PROBLEMS = "billing.view_outboxmessage"
RETRY_OUTBOX = "billing.change_outboxmessage"
REPROCESS_STRIPE_EVENT = "billing.change_stripeevent"
VIEW_INVOICES = "billing.view_invoice"
CHANGE_INVOICES = "billing.change_invoice"  # void, re-issue, close a month
VIEW_GATEWAY_TOKENS = "quotas.view_gatewaytoken"
ADD_GATEWAY_TOKEN = "quotas.add_gatewaytoken"  # noqa: S105 - a permission name
REVOKE_GATEWAY_TOKEN = "quotas.change_gatewaytoken"  # noqa: S105 - a permission name
VIEW_BOOKINGS = "quotas.view_booking"
CANCEL_BOOKING = "quotas.change_booking"

SUPPORT_PERMISSIONS = [
    "orgs.view_organization", "orgs.view_membership", "orgs.view_invitation",
    "orgs.view_apikey", "orgs.view_auditevent",
    "quotas.view_capacitypool", "quotas.view_allocation", "metering.view_usageevent",
    "metering.view_usagehourly",
    # Waitlist, waves, quota requests, gateway tokens, billing.
    "rollout.view_application", "rollout.view_applicationcheck", "rollout.view_applicationnote",
    "rollout.view_rolloutwave", "rollout.view_pooladmission", "rollout.view_orgpoolpreference",
    "rollout.view_quotarequest", "quotas.view_gatewaytoken", "quotas.view_booking",
    "billing.view_bookingcharge",
    "billing.view_priceversion", "billing.view_billingaccount", "billing.view_spendalert",
    "billing.view_invoice", "billing.view_invoiceline", "billing.view_outboxmessage",
    "billing.view_stripeevent",
]
OPERATOR_PERMISSIONS = SUPPORT_PERMISSIONS + [
    CHANGE_LIFECYCLE, "orgs.change_membership", "orgs.change_apikey",
    GRANT_ALLOCATION, CHANGE_ALLOCATION, "quotas.add_capacitypool", CHANGE_CAPACITY,
    DECIDE_APPLICATIONS, "rollout.change_applicationcheck", "rollout.add_applicationnote",
    "rollout.add_rolloutwave", CHANGE_WAVES, "rollout.change_pooladmission",
    "rollout.change_orgpoolpreference", DECIDE_QUOTA_REQUESTS,
    "quotas.add_gatewaytoken", "quotas.change_gatewaytoken",
    "billing.add_priceversion", "billing.change_outboxmessage", "billing.change_stripeevent",
    "billing.change_billingaccount", CHANGE_INVOICES, CANCEL_BOOKING,
]
GROUP_PERMISSIONS = {"support": SUPPORT_PERMISSIONS, "operator": OPERATOR_PERMISSIONS}


def groups_sync(*, group_model, permission_model, models_present=None) -> None:
    """Makes each group hold exactly its permissions. Takes the models as arguments so the
    migration can pass its historical ones. `models_present` ((app label, model name) pairs):
    the permissions of other models are left out, for a migration that runs before every model
    the lists name exists (on an empty database, the latest console migration adds them)."""
    for name, perms in GROUP_PERMISSIONS.items():
        if models_present is not None:
            perms = [p for p in perms if _model_of(p) in models_present]
        query = Q()
        for perm in perms:
            app_label, codename = perm.split(".")
            query |= Q(content_type__app_label=app_label, codename=codename)
        found = list(permission_model.objects.filter(query))
        if len(found) != len(perms):
            raise RuntimeError(f"Group {name}: {len(perms) - len(found)} permissions missing.")
        group, _ = group_model.objects.get_or_create(name=name)
        group.permissions.set(found)


def _model_of(permission: str) -> tuple[str, str]:
    """("orgs", "organization") of "orgs.view_organization"."""
    app_label, codename = permission.split(".")
    return app_label, codename.split("_", 1)[1]
