"""Who may open which org page. Every org-scoped portal view goes through `org_page`: the org is
looked up through the user's memberships, so another org's pages and objects are a 404."""

from dataclasses import dataclass
from functools import wraps

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.urls import reverse

from billing.bookings import BOOKING_READERS
from orgs.models import (
    BILLING_READERS,
    KEY_LIMIT_MANAGERS,
    KEY_MANAGERS,
    MEMBER_MANAGERS,
    Membership,
)
from portal.selectors import membership_get, memberships_for_user
from sluice.errors import DomainError
from sluice.messages import flash


@dataclass(frozen=True)
class NavItem:
    name: str
    label: str
    roles: frozenset | None = None  # None: every member


# The portal's pages, in menu order. A domain adds its page here (usage, billing, waitlist...).
PORTAL_NAV = [
    NavItem("status", "Status"),
    NavItem("members", "Members", roles=MEMBER_MANAGERS),
    NavItem("keys", "API keys"),
    NavItem("quotas", "Quotas"),
    NavItem("usage", "Usage"),
    NavItem("quota_requests", "Ask for more"),
    NavItem("bookings", "Book capacity", roles=BOOKING_READERS),
    NavItem("billing", "Billing", roles=BILLING_READERS),
    NavItem("admin_keys", "Admin keys", roles=MEMBER_MANAGERS),
    NavItem("webhooks", "Webhooks", roles=MEMBER_MANAGERS),
]


class OrgContext:
    """What the portal layout needs about the current org, built once per request."""

    def __init__(self, *, request, membership: Membership, current: str):
        self.request, self.membership, self.org = request, membership, membership.org
        self.current = current

    @property
    def nav(self) -> list[dict]:
        return [
            {"label": item.label, "current": item.name == self.current,
             "url": reverse(f"portal:{item.name}", args=[self.org.slug])}
            for item in PORTAL_NAV
            if item.roles is None or self.membership.role in item.roles
        ]

    @property
    def memberships(self) -> list[Membership]:
        # Only for the org switcher; evaluated when the layout renders it.
        if not hasattr(self, "_memberships"):
            self._memberships = list(memberships_for_user(user=self.request.user))
        return self._memberships

    @property
    def can_manage_keys(self) -> bool:
        return self.membership.role in KEY_MANAGERS

    @property
    def can_set_key_limits(self) -> bool:
        return self.membership.role in KEY_LIMIT_MANAGERS


def org_page(*, page: str, roles: frozenset | None = None, hidden: bool = False):
    """Decorates `view(request, membership, ...)` reached at /portal/o/<slug>/...: the user must
    be a member (else 404) holding one of `roles` (else 403, or 404 when `hidden`: billing
    pages do not admit they exist, like the billing API)."""

    def decorator(view):
        @login_required
        @wraps(view)
        def wrapper(request, slug: str, *args, **kwargs):
            membership = membership_get(user=request.user, slug=slug)
            if roles is not None and membership.role not in roles:
                if hidden:
                    raise Http404("No such page.")
                raise PermissionDenied("Your role in this organization does not allow this.")
            request.portal = OrgContext(request=request, membership=membership, current=page)
            # Remembered so /portal/ reopens the org the user worked in last (written only on
            # change: an unchanged session is not saved again).
            if request.session.get("portal_org") != membership.org.slug:
                request.session["portal_org"] = membership.org.slug
            return view(request, membership, *args, **kwargs)

        return wrapper

    return decorator


def flash_result(request, action, success: str, *, at: str = "") -> bool:
    """Runs a service call; its domain error (last owner, already revoked...) becomes the
    message the user sees, beside the form it came from (`at`), and nothing was written.
    Returns whether it succeeded."""
    try:
        action()
    except DomainError as error:
        flash(request, messages.ERROR, error.message, at=at)
        return False
    flash(request, messages.SUCCESS, success, at=at)
    return True
