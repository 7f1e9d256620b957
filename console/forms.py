from decimal import Decimal

from django import forms
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django_otp import match_token, user_has_device

from billing.rating import (
    LIST_BOOKING_INPUT_MICROS_PER_TPS_HOUR,
    LIST_BOOKING_OUTPUT_MICROS_PER_TPS_HOUR,
)
from orgs.services.lifecycle import TRANSITIONS
from quotas.models import LEASE_TTL_SECONDS, CapacityPool, LimiterFailurePolicy
from rollout.models import ApplicationState, CheckItem, Decision, UseCase
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
    capacity_tps = forms.IntegerField(label="Decode capacity, output tokens/s", min_value=1)
    prefill_capacity_tps = forms.IntegerField(
        label="Prefill capacity, input tokens/s", min_value=1, required=False,
        help_text="Empty: input tokens count with output against the decode capacity. "
                  "Declaring it gives the allocations input tokens/s in proportion.")
    reason = forms.CharField(label="Reason", required=False, max_length=500)


class ApplicationFilterForm(forms.Form):
    state = forms.ChoiceField(label="State", required=False,
                              choices=[("", "Any")] + ApplicationState.choices)
    use_case = forms.ChoiceField(label="Use case", required=False,
                                 choices=[("", "Any")] + UseCase.choices)
    pool = forms.ModelChoiceField(label="Pool", required=False, empty_label="Any",
                                  queryset=CapacityPool.objects.all())
    min_score = forms.IntegerField(label="Score from", required=False)
    max_score = forms.IntegerField(label="Score to", required=False)


class BulkDecisionForm(forms.Form):
    decision = forms.ChoiceField(choices=[(Decision.APPROVE, "Approve"),
                                          (Decision.REJECT, "Reject")])
    applications = forms.TypedMultipleChoiceField(coerce=int, choices=[])
    reason = forms.CharField(label="Reason (audit log)", max_length=1000)
    shared_reason = forms.CharField(label="Reason shared with the organizations",
                                    required=False, max_length=1000)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Any id: the service answers for unknown ones (NotFound) with their list.
        self.fields["applications"].valid_value = lambda value: str(value).isdigit()


class CheckForm(forms.Form):
    item = forms.ChoiceField(choices=CheckItem.choices)
    done = forms.BooleanField(required=False)
    note = forms.CharField(required=False, max_length=500)


class ReviewerForm(forms.Form):
    reviewer = forms.ModelChoiceField(
        label="Reviewer", queryset=User.objects.filter(is_staff=True, is_active=True)
        .order_by("email"))


class NoteForm(forms.Form):
    body = forms.CharField(label="Note", widget=forms.Textarea(attrs={"rows": 3}),
                           max_length=5000)


class ScoreOverrideForm(forms.Form):
    score = forms.IntegerField(label="Score (empty restores the computed one)", required=False)
    reason = forms.CharField(label="Reason", max_length=1000)


class DecisionForm(forms.Form):
    decision = forms.ChoiceField(choices=Decision.choices)
    reason = forms.CharField(label="Internal reason (audit log)", max_length=1000)
    shared_reason = forms.CharField(
        label="Reason shared with the organization", required=False, max_length=1000,
        help_text="Required when asking for information; shown in the portal.")
    pool = forms.ModelChoiceField(label="Queue pool (approval)", required=False,
                                  queryset=CapacityPool.objects.all(),
                                  empty_label="Keep the org's pool")


class WaveForm(forms.Form):
    pool = forms.ModelChoiceField(label="Pool", queryset=CapacityPool.objects.all())
    name = forms.CharField(label="Name", max_length=200)
    opens_at = forms.DateTimeField(label="Opens at (UTC)", widget=forms.DateTimeInput(
        attrs={"type": "datetime-local"}))
    closes_at = forms.DateTimeField(label="Closes at (UTC)", required=False,
                                    widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))
    capacity_tps = forms.IntegerField(label="Capacity added, tokens/s", min_value=0)
    max_orgs = forms.IntegerField(label="Maximum organizations", min_value=1)
    guaranteed_tps = forms.IntegerField(label="Default guaranteed tokens/s", min_value=1)
    burst_tps = forms.IntegerField(label="Default burst tokens/s", min_value=1)
    daily_tokens = forms.IntegerField(label="Default daily tokens", min_value=1)
    max_concurrency = forms.IntegerField(label="Default concurrent requests", min_value=1)


class ReasonForm(forms.Form):
    reason = forms.CharField(label="Reason", required=False, max_length=1000)


class DollarsPerMtokField(forms.DecimalField):
    """Dollars per million tokens, entered as "5" or "0.25", kept as integer micro-dollars."""

    def __init__(self, **kwargs):
        super().__init__(min_value=0, max_digits=12, decimal_places=6, **kwargs)

    def clean(self, value):
        dollars = super().clean(value)
        return None if dollars is None else int(dollars * 1_000_000)


class PriceVersionForm(forms.Form):
    pool = forms.ModelChoiceField(label="Pool", queryset=CapacityPool.objects.all())
    effective_from = forms.DateTimeField(
        label="Effective from (UTC, a whole hour)",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local", "step": 3600}))
    input_micros_per_mtok = DollarsPerMtokField(label="Input, $ per million tokens")
    cached_input_micros_per_mtok = DollarsPerMtokField(
        label="Cached input, $ per million tokens", required=False,
        help_text="Empty: the input price.")
    output_micros_per_mtok = DollarsPerMtokField(label="Output, $ per million tokens")
    premium_input_micros_per_mtok = DollarsPerMtokField(
        label="Fast-tier premium on input, $ per million tokens", initial=0)
    premium_output_micros_per_mtok = DollarsPerMtokField(
        label="Fast-tier premium on output, $ per million tokens", initial=0)
    booking_output_micros_per_tps_hour = DollarsPerMtokField(
        label="Booked capacity, $ per output token/s and hour", required=False,
        initial=Decimal(LIST_BOOKING_OUTPUT_MICROS_PER_TPS_HOUR) / 1_000_000,
        help_text="Empty: the list price.")
    booking_input_micros_per_tps_hour = DollarsPerMtokField(
        label="Booked capacity, $ per input token/s and hour", required=False,
        initial=Decimal(LIST_BOOKING_INPUT_MICROS_PER_TPS_HOUR) / 1_000_000,
        help_text="Empty: the list price.")
    note = forms.CharField(label="Note", required=False, max_length=200)

    def clean_booking_output_micros_per_tps_hour(self) -> int:
        value = self.cleaned_data["booking_output_micros_per_tps_hour"]
        return LIST_BOOKING_OUTPUT_MICROS_PER_TPS_HOUR if value is None else value

    def clean_booking_input_micros_per_tps_hour(self) -> int:
        value = self.cleaned_data["booking_input_micros_per_tps_hour"]
        return LIST_BOOKING_INPUT_MICROS_PER_TPS_HOUR if value is None else value


class PoolSettingsForm(forms.Form):
    guaranteeable_ratio = forms.DecimalField(
        label="Guaranteeable ratio", min_value=Decimal("0.001"), max_value=1, max_digits=4,
        decimal_places=3, help_text="Share of capacity that may be guaranteed; the rest is "
                                    "headroom for bursts.")
    limiter_failure_policy = forms.ChoiceField(
        label="When Redis is unreachable", choices=LimiterFailurePolicy.choices)
    speed_floor_output_tps = forms.IntegerField(
        label="Speed floor, output tokens/s", min_value=0,
        help_text="Slower requests are billed without the fast-tier premium.")
    ttft_ceiling_ms = forms.IntegerField(label="Time-to-first-token ceiling, ms", min_value=0)
    output_estimate_default = forms.IntegerField(
        label="Output estimate before an org has history, tokens", min_value=1, required=False,
        help_text="Authorize reserves min(max_tokens, estimate); then the p95 of the org's "
                  "recent outputs.")
    output_estimate_floor = forms.IntegerField(
        label="Least output estimate, tokens", min_value=0, required=False)
    lease_ttl_seconds = forms.IntegerField(
        label="Lease TTL, seconds", min_value=LEASE_TTL_SECONDS[0],
        max_value=LEASE_TTL_SECONDS[1], required=False,
        help_text="How long a leased request holds its slot without a heartbeat: what a "
                  "crashed gateway costs in capacity.")
    queue_max_wait_ms = forms.IntegerField(
        label="Admission queue: longest wait, ms", min_value=0, max_value=20_000,
        required=False, help_text="Requests may wait this long for capacity instead of being "
                                  "refused (their own budget permitting); 0: no queue.")


class PoolAdmissionForm(forms.Form):
    auto_admit = forms.BooleanField(
        label="Admit queued organizations automatically when capacity frees up",
        required=False)
    quota_auto_approve_max_tps = forms.IntegerField(
        label="Auto-approve guaranteed tokens/s growth up to", min_value=0,
        help_text="Per org, over the window. 0 on every rule: each request waits for an "
                  "operator.")
    quota_auto_approve_max_burst_tps = forms.IntegerField(
        label="Auto-approve burst tokens/s growth up to", min_value=0)
    quota_auto_approve_max_daily_tokens = forms.IntegerField(
        label="Auto-approve daily tokens growth up to", min_value=0)
    quota_auto_approve_max_concurrency = forms.IntegerField(
        label="Auto-approve concurrent requests growth up to", min_value=0)
    quota_auto_approve_window_days = forms.IntegerField(
        label="Window, days", min_value=1, max_value=366, initial=30,
        help_text="Requests auto-approved for an org in this many days count together.")


class GatewayTokenForm(forms.Form):
    name = forms.CharField(label="Gateway name", max_length=100,
                           help_text="Where the gateway runs, e.g. “edge us-east 1”.")
