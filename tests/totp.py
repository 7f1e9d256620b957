"""Helpers for operator two-factor sign-in in tests: real TOTP devices and real codes."""

from django.test import Client
from django_otp.oath import TOTP
from django_otp.plugins.otp_totp.models import TOTPDevice

from tests.factories import PASSWORD


def totp_device_for(user) -> TOTPDevice:
    return TOTPDevice.objects.create(user=user, name="test authenticator", confirmed=True)


def totp_code(device: TOTPDevice) -> str:
    totp = TOTP(device.bin_key, device.step, device.t0, device.digits, device.drift)
    return f"{totp.token():0{device.digits}d}"


def totp_code_from_secret(base32_secret: str) -> str:
    from base64 import b32decode

    return f"{TOTP(b32decode(base32_secret)).token():06d}"


def console_client(user) -> Client:
    """A client signed in to the console the real way: password plus a TOTP code."""
    client = Client()
    device = totp_device_for(user)
    response = client.post("/admin/login/", {"username": user.username, "password": PASSWORD,
                                              "otp_token": totp_code(device)})
    assert response.status_code == 302, response.content.decode()[:2000]
    return client
