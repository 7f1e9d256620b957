from django import forms
from django.core.exceptions import ValidationError
from django_otp import match_token, user_has_device

from orgs.services.lifecycle import TRANSITIONS
from quotas.models import CapacityPool
from sluice.auth_forms import ThrottledAuthenticationForm


class ConsoleLoginForm(ThrottledAuthenticationForm):
    username = forms.CharField(label="Email", widget=forms.EmailInput(
        attrs={"autocomplete": "username", "autofocus": True}))
    otp_token = forms.CharField(
        label="Authentication code", required=False, max_length=8,
        widget=forms.TextInput(attrs={"autocomplete": "one-time-code", "inputmode": "numeric"}),
        help_text="Six digits from your authenticator app. The first time, leave it empty: "
                  "you will set the app up next.")
    needs_enrollment = False

    def confirm_login_allowed(self, user):
        super().confirm_login_allowed(user)
        if not user.is_staff:
            # The same words as a wrong password: the console does not confirm who is staff.
            raise self.get_invalid_login_error()

    def clean_second_factor(self, user) -> None:
        self.needs_enrollment = not user_has_device(user)
        if self.needs_enrollment:
            return
        device = match_token(user, (self.cleaned_data.get("otp_token") or "").strip())
        if device is None:
            raise ValidationError("That authentication code is not valid.", code="invalid_token")
        user.otp_device = device  # django_otp marks the session verified at login


class TotpConfirmForm(forms.Form):
    token = forms.CharField(label="Code from your authenticator app", max_length=8,
                            widget=forms.TextInput(attrs={"autocomplete": "one-time-code",
                                                          "inputmode": "numeric"}))


class LifecycleForm(forms.Form):
    action = forms.ChoiceField(choices=[(a, a) for a in TRANSITIONS])
    reason = forms.CharField(required=False, max_length=500)


class AllocationChangeForm(forms.Form):
    guaranteed_tps = forms.IntegerField(label="Guaranteed tokens/s", min_value=1)
    burst_tps = forms.IntegerField(label="Burst ceiling tokens/s", min_value=1)
    daily_tokens = forms.IntegerField(label="Daily tokens", min_value=1)
    max_concurrency = forms.IntegerField(label="Concurrent requests", min_value=1)
    reason = forms.CharField(label="Reason (kept in the audit log)", required=False,
                             max_length=500)


class AllocationGrantForm(AllocationChangeForm):
    pool = forms.ModelChoiceField(label="Pool", queryset=CapacityPool.objects.all())
    field_order = ["pool"]


class PoolCapacityForm(forms.Form):
    capacity_tps = forms.IntegerField(label="Capacity tokens/s", min_value=1)
    reason = forms.CharField(label="Reason", required=False, max_length=500)
