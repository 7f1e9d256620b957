"""Operator sign-in: password and TOTP code; a first sign-in enrolls the authenticator."""

from base64 import b32encode

import qrcode
import qrcode.image.svg
from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect, render
from django.urls import reverse, reverse_lazy
from django.utils.http import url_has_allowed_host_and_scheme
from django_otp import login as otp_login
from django_otp import user_has_device
from django_otp.plugins.otp_totp.models import TOTPDevice

from console.forms import ConsoleLoginForm, TotpConfirmForm
from console.services import totp_device_confirm
from sluice.login_throttle import device_remember


def _next_url(request) -> str:
    target = request.POST.get("next") or request.GET.get("next") or ""
    if url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()},
                                       require_https=request.is_secure()):
        return target
    return reverse("admin:index")


def console_login(request, *, site):
    if request.method == "GET" and site.has_permission(request):
        return redirect(_next_url(request))
    form = ConsoleLoginForm(request, data=request.POST or None)
    if request.method == "POST" and form.is_valid():
        login(request, form.get_user())
        if form.needs_enrollment:
            return redirect("admin:totp_enroll")
        response = redirect(_next_url(request))
        # Past the password and the second factor: this browser may keep trying the account
        # while strangers are braked (sluice/login_throttle.py).
        device_remember(request=request, response=response,
                        username=form.get_user().get_username())
        return response
    return render(request, "console/login.html", {
        **site.each_context(request), "form": form, "next": _next_url(request),
    })


def _qr_svg(data: str) -> str:
    # SvgPathImage: pure Python, no Pillow; one <path>, small enough to inline.
    image = qrcode.make(data, image_factory=qrcode.image.svg.SvgPathImage, box_size=8)
    return image.to_string(encoding="unicode")


@login_required(login_url=reverse_lazy("admin:login"))
def totp_enroll(request):
    """Only for staff who passed the password and have no confirmed authenticator yet."""
    user = request.user
    if not user.is_staff:
        raise PermissionDenied
    if user_has_device(user):
        return redirect("admin:login")
    device = (TOTPDevice.objects.filter(user=user, confirmed=False).first()
              or TOTPDevice.objects.create(user=user, name="authenticator", confirmed=False))
    form = TotpConfirmForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        if totp_device_confirm(device=device, token=form.cleaned_data["token"].strip(),
                               actor=user):
            device.refresh_from_db()
            otp_login(request, device)
            messages.success(request, "Two-factor authentication is set up.")
            return redirect("admin:index")
        form.add_error("token", "That code is not valid. Check your device's clock and retry.")
    return render(request, "console/totp_enroll.html", {
        "form": form, "qr_svg": _qr_svg(device.config_url),
        "secret": b32encode(device.bin_key).decode(),
    })
