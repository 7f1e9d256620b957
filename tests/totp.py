"""Helpers for operator two-factor sign-in in tests: real TOTP devices and real codes."""

from django_otp.oath import TOTP
from django_otp.plugins.otp_totp.models import TOTPDevice


def totp_device_for(user) -> TOTPDevice:
    return TOTPDevice.objects.create(user=user, name="test authenticator", confirmed=True)


def totp_code(device: TOTPDevice) -> str:
    totp = TOTP(device.bin_key, device.step, device.t0, device.digits, device.drift)
    return f"{totp.token():0{device.digits}d}"


def totp_code_from_secret(base32_secret: str) -> str:
    from base64 import b32decode

    return f"{TOTP(b32decode(base32_secret)).token():06d}"
