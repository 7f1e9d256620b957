from django.db import transaction
from django_otp.plugins.otp_totp.models import TOTPDevice

from orgs.services import audit_record


@transaction.atomic(durable=True)
def totp_device_confirm(*, device: TOTPDevice, token: str, actor) -> bool:
    """Confirms a new authenticator once it produced a valid code. Audited: a second factor
    appearing on an operator account is something to be able to trace."""
    device = TOTPDevice.objects.select_for_update().get(pk=device.pk)
    if device.confirmed or not device.verify_token(token):
        return False
    device.confirmed = True
    device.save(update_fields=["confirmed"])
    audit_record(actor=actor, action="operator.totp_enroll", target=device,
                 after={"device": device.name})
    return True
