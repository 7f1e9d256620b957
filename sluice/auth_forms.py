"""The sign-in form shared by the portal and the console, with brute-force protection."""

from django import forms
from django.contrib.auth.forms import AuthenticationForm

from sluice.client_address import request_client_address
from sluice.login_throttle import (
    device_known,
    login_failure_record,
    login_failures_clear,
    login_lock_status,
)


class ThrottledAuthenticationForm(AuthenticationForm):
    """Refuses a locked (username, IP) pair before checking the password, counts every failure
    (password or second factor) and clears the count after a full success."""

    error_messages = {
        **AuthenticationForm.error_messages,
        "locked": "Too many failed sign-in attempts. Try again in %(minutes)d minutes.",
        "account_braked": "Too many failed sign-in attempts on this account. Try again in "
                          "%(minutes)d minutes, or from a browser you signed in with before.",
    }

    def clean(self):
        username = self.cleaned_data.get("username") or ""
        ip = request_client_address(self.request)
        lock = login_lock_status(username=username, ip=ip,
                                 known_device=device_known(request=self.request,
                                                           username=username))
        if lock.locked:
            code = "account_braked" if lock.reason == "account" else "locked"
            raise forms.ValidationError(
                self.error_messages[code], code=code,
                params={"minutes": -(-lock.retry_after_seconds // 60)},
            )
        try:
            cleaned = super().clean()
            self.clean_second_factor(self.get_user())
        except forms.ValidationError:
            login_failure_record(username=username, ip=ip)
            raise
        login_failures_clear(username=username, ip=ip)
        return cleaned

    def clean_second_factor(self, user) -> None:
        """Sites that require a second factor check it here; the portal has none."""
