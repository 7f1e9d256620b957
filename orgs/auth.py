"""Operator bearer tokens for scripts: `Authorization: Bearer op_<lookup>_<secret>`."""

from django.utils import timezone
from rest_framework import authentication, exceptions

from orgs.models import OperatorToken
from sluice.secrets import secret_matches, secret_parse_lookup

TOUCH_EVERY_SECONDS = 60


class OperatorTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode(errors="replace")
        if not header.startswith(f"{self.keyword} op_"):
            return None  # not ours: let session authentication try
        token = header[len(self.keyword) + 1:].strip()
        lookup = secret_parse_lookup(token, kind="op")
        row = (OperatorToken.objects.select_related("user").filter(lookup=lookup).first()
               if lookup else None)
        if row is None or not secret_matches(token, row.digest) or row.revoked_at:
            raise exceptions.AuthenticationFailed("Invalid or revoked operator token.")
        if not row.user.is_active or not row.user.is_staff:
            raise exceptions.AuthenticationFailed("The token's user is no longer an operator.")
        now = timezone.now()
        if row.last_used_at is None or (now - row.last_used_at).total_seconds() > \
                TOUCH_EVERY_SECONDS:
            OperatorToken.objects.filter(pk=row.pk).update(last_used_at=now)
        return row.user, row

    def authenticate_header(self, request):
        return self.keyword
