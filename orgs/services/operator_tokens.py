from django.db import transaction
from django.utils import timezone

from orgs.models import OperatorToken
from orgs.services.audit import Actor, audit_record
from sluice.errors import Conflict, PermissionDenied
from sluice.secrets import secret_issue

OPERATOR_TOKEN_KIND = "op"  # noqa: S105 - a prefix, not a secret


@transaction.atomic(durable=True)
def operator_token_create(*, user, name: str, actor: Actor) -> tuple[OperatorToken, str]:
    if not user.is_staff:
        raise PermissionDenied("Operator tokens can only be issued to staff users.",
                               code="not_staff")
    issued = secret_issue(kind=OPERATOR_TOKEN_KIND)
    token = OperatorToken.objects.create(user=user, name=name, lookup=issued.lookup,
                                         digest=issued.digest)
    audit_record(actor=actor, action="operator_token.create", target=token,
                 after={"user": user.get_username(), "name": name})
    return token, issued.plaintext


@transaction.atomic(durable=True)
def operator_token_revoke(*, token: OperatorToken, actor: Actor) -> OperatorToken:
    token = OperatorToken.objects.select_for_update().get(pk=token.pk)
    if token.revoked_at:
        raise Conflict("This token is already revoked.", code="already_revoked")
    token.revoked_at = timezone.now()
    token.save(update_fields=["revoked_at"])
    audit_record(actor=actor, action="operator_token.revoke", target=token)
    return token
