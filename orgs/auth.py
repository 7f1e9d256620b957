"""Bearer credentials of the REST API besides the browser session.

- Operator tokens for scripts: `Authorization: Bearer op_<lookup>_<secret>`, acting as a staff
  user, accepted everywhere.
- Organization admin keys: `Authorization: Bearer sk_admin_<lookup>_<secret>`, accepted only by
  the org-facing endpoints that declare `ADMIN_KEY_AUTHENTICATION` (usage, costs, API keys),
  acting for their one org, and rate-limited per key (`AdminKeyRateThrottle`). Elsewhere an
  admin key is not a credential at all (401). A key carries its creator's rights, read at
  each request: the creator's current role in the org (a key made by an admin reads no
  costs). A creator who is no longer an active member leaves a dead key (401; leaving the org
  revokes their keys too). A key without a creator (made by a command or a script) acts as
  an org admin: usage and API keys, no money.
"""

from dataclasses import dataclass

from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, throttling

from orgs.models import AdminKey, OperatorToken, Role
from orgs.services.admin_keys import ADMIN_KEY_KIND
from sluice.secrets import secret_matches, secret_parse_lookup

TOUCH_EVERY_SECONDS = 60
# The role of an admin key that no person made (a command, a script): an admin's, which
# manages API keys and reads usage but never sees money.
CREATORLESS_ADMIN_KEY_ROLE = Role.ADMIN


def _bearer(request, kind: str) -> str | None:
    header = authentication.get_authorization_header(request).decode(errors="replace")
    if not header.startswith(f"Bearer {kind}_"):
        return None  # not ours: let the next authentication class try
    return header[len("Bearer "):].strip()


def _touch(model, row) -> None:
    """last_used_at at most once a minute: no write per request."""
    now = timezone.now()
    if row.last_used_at is None or (now - row.last_used_at).total_seconds() > \
            TOUCH_EVERY_SECONDS:
        model.objects.filter(pk=row.pk).update(last_used_at=now)


class OperatorTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        token = _bearer(request, "op")
        if token is None:
            return None
        lookup = secret_parse_lookup(token, kind="op")
        row = (OperatorToken.objects.select_related("user").filter(lookup=lookup).first()
               if lookup else None)
        if row is None or not secret_matches(token, row.digest) or row.revoked_at:
            raise exceptions.AuthenticationFailed("Invalid or revoked operator token.")
        if not row.user.is_active or not row.user.is_staff:
            raise exceptions.AuthenticationFailed("The token's user is no longer an operator.")
        _touch(OperatorToken, row)
        return row.user, row

    def authenticate_header(self, request):
        return self.keyword


@dataclass(frozen=True)
class AdminKeyPrincipal:
    """request.user when an admin key authenticated: it may act for `key.org` only, and is no
    user (no membership, no staff rights)."""

    key: AdminKey
    role: str  # what the key may do: its creator's current role in the org
    is_authenticated = True
    is_staff = False
    is_active = True

    @property
    def org_id(self) -> int:
        return self.key.org_id

    @property
    def actor(self) -> str:
        """Who the audit log names for what the key did."""
        return f"admin_key:{self.key.display_prefix}"

    def __str__(self) -> str:
        return self.actor


def _creator_role(key: AdminKey) -> str | None:
    if key.created_by_id is None:
        return CREATORLESS_ADMIN_KEY_ROLE
    return key.creator_role if key.created_by.is_active else None


class AdminKeyAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        token = _bearer(request, ADMIN_KEY_KIND)
        if token is None:
            return None
        lookup = secret_parse_lookup(token, kind=ADMIN_KEY_KIND)
        row = (AdminKey.objects.select_related("org", "created_by").with_creator_role()
               .filter(lookup=lookup).first() if lookup else None)
        if row is None or not secret_matches(token, row.digest) or row.revoked_at:
            raise exceptions.AuthenticationFailed("Invalid or revoked admin key.")
        role = _creator_role(row)
        if role is None:
            raise exceptions.AuthenticationFailed(
                "This admin key's creator is no longer an active member of the organization.")
        _touch(AdminKey, row)
        return AdminKeyPrincipal(key=row, role=role), row

    def authenticate_header(self, request):
        return self.keyword


class AdminKeyRateThrottle(throttling.SimpleRateThrottle):
    """Per admin key, in the default cache (Redis, shared by every web process): rate from
    REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]["admin_key"]. Sessions are not throttled here."""

    scope = "admin_key"

    def get_rate(self):
        # Read per request rather than at import, so a settings override takes effect.
        from rest_framework.settings import api_settings

        return api_settings.DEFAULT_THROTTLE_RATES[self.scope]

    def get_cache_key(self, request, view):
        if not isinstance(request.user, AdminKeyPrincipal):
            return None
        return self.cache_format % {"scope": self.scope, "ident": request.user.key.pk}


# The org-facing endpoints that admin keys may call declare these.
ADMIN_KEY_AUTHENTICATION = [AdminKeyAuthentication, OperatorTokenAuthentication,
                            authentication.SessionAuthentication]
ADMIN_KEY_THROTTLES = [AdminKeyRateThrottle]


class OperatorTokenScheme(OpenApiAuthenticationExtension):
    """How OpenAPI names the operator token (registered by being defined)."""

    target_class = OperatorTokenAuthentication
    name = "operatorToken"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "bearerFormat": "op_<lookup>_<secret>",
                "description": "An operator token (`manage.py operator_token_create`): acts as "
                               "its staff user, everywhere."}


class AdminKeyScheme(OpenApiAuthenticationExtension):
    """How OpenAPI names the admin key (registered by being defined)."""

    target_class = AdminKeyAuthentication
    name = "adminKey"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "bearerFormat": "sk_admin_<lookup>_<secret>",
                "description": "An organization's admin key: its usage, costs and API keys."}


class AdminKeyOrgRoute:
    """OpenAI's organization paths (`/v1/organization/...`) for an org-scoped GET view: the org
    is the admin key's own, so OpenAI-shaped tools need only a base URL and the key."""

    def get(self, request):
        if not isinstance(request.user, AdminKeyPrincipal):
            raise exceptions.NotAuthenticated(
                "Use the organization's admin key (Authorization: Bearer sk_admin_...).")
        return super().get(request, org_id=request.user.org_id)
