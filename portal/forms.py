from django import forms
from django.contrib.auth import get_user_model, password_validation
from django.contrib.auth.forms import PasswordResetForm as DjangoPasswordResetForm
from django_countries import countries

from orgs.models import Role, ServiceTier
from portal.services import PASSWORD_RESET_EMAILS_PER_ADDRESS, password_reset_email_queue
from quotas.bookings import BOOKING_DAILY_TOKENS_MAX, BOOKING_TPS_MAX, BookingAsk
from quotas.models import CapacityPool
from quotas.selectors import pool_regions
from rollout.applications import APPLICANT_FIELDS
from rollout.models import (
    QUOTA_REQUEST_CONCURRENCY_MAX,
    QUOTA_REQUEST_DAILY_TOKENS_MAX,
    QUOTA_REQUEST_TPS_MAX,
    Application,
)
from sluice.auth_forms import ThrottledAuthenticationForm
from sluice.rate_limits import rate_limit_spend
from webhooks.models import EventType


class AccountForm(forms.Form):
    email = forms.EmailField(label="Work email", widget=forms.EmailInput(
        attrs={"autocomplete": "email"}))
    password = forms.CharField(label="Password", strip=False, widget=forms.PasswordInput(
        attrs={"autocomplete": "new-password"}),
        help_text=password_validation.password_validators_help_text_html())

    def clean(self):
        cleaned = super().clean()
        password, email = cleaned.get("password"), cleaned.get("email")
        if password:
            # An unsaved user lets the similarity validator compare against the email.
            candidate = get_user_model()(username=email or "", email=email or "")
            try:
                password_validation.validate_password(password, candidate)
            except forms.ValidationError as error:
                self.add_error("password", error)
        return cleaned


class SignUpForm(AccountForm):
    org_name = forms.CharField(label="Organization name", max_length=200)
    field_order = ["org_name", "email", "password"]


class LoginForm(ThrottledAuthenticationForm):
    username = forms.CharField(label="Email", widget=forms.EmailInput(
        attrs={"autocomplete": "username", "autofocus": True}))


class PasswordResetForm(DjangoPasswordResetForm):
    """Django's form (active users with a usable password and this address), but the email
    leaves through the mail outbox after the response instead of inside it."""

    def save(self, **kwargs) -> None:
        email = self.cleaned_data["email"]
        # Counted for every address asked about, known or not, so the count tells nothing;
        # beyond the rate the answer is the same and no email leaves (no mail-bombing).
        if rate_limit_spend(scope="password-reset-email", identity=email,
                            rate=PASSWORD_RESET_EMAILS_PER_ADDRESS):
            return
        for user in self.get_users(email):
            password_reset_email_queue(user=user)


class OrgApplyForm(forms.Form):
    name = forms.CharField(label="Organization name", max_length=200)


class InviteForm(forms.Form):
    email = forms.EmailField(label="Email address")
    role = forms.ChoiceField(label="Role", choices=Role.choices, initial=Role.DEVELOPER)

    def __init__(self, *args, may_grant_owner: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        if not may_grant_owner:
            # Only owners invite owners (orgs.services.members); the service refuses it anyway.
            self.fields["role"].choices = [c for c in Role.choices if c[0] != Role.OWNER]


class RoleForm(forms.Form):
    role = forms.ChoiceField(label="Role", choices=Role.choices)


class ApiKeyCreateForm(forms.Form):
    name = forms.CharField(label="Key name", max_length=100,
                           help_text="Where the key is used, e.g. “production voice agent”.")


class AdminKeyCreateForm(forms.Form):
    name = forms.CharField(label="Key name", max_length=100,
                           help_text="What uses it, e.g. “Grafana usage dashboard”.")


class WebhookEndpointForm(forms.Form):
    url = forms.URLField(label="Endpoint URL", max_length=500, assume_scheme="https",
                         help_text="Where Sluice POSTs signed events (https://).")
    description = forms.CharField(label="Description", max_length=200, required=False)
    event_types = forms.MultipleChoiceField(
        label="Events", choices=EventType.choices, widget=forms.CheckboxSelectMultiple,
        initial=EventType.values)


class OrgQueueDefaultForm(forms.Form):
    queue_threshold_default_ms = forms.IntegerField(
        label="Wait for capacity, ms", min_value=0, max_value=20_000, required=False,
        help_text="How long your requests may wait in a pool's queue instead of being refused "
                  "when neither they (queue_threshold) nor their key say: 0 or 50-20,000; "
                  "empty: not at all. The pool's maximum applies.")


class ApiKeyLimitsForm(forms.Form):
    """A key's own slice of the organization's limits (empty: the organization's alone)."""

    slice_output_tps = forms.IntegerField(
        label="Output tokens/s", min_value=1, required=False,
        help_text="Input and output together in pools that meter them together.")
    slice_input_tps = forms.IntegerField(label="Input tokens/s", min_value=1, required=False)
    slice_daily_tokens = forms.IntegerField(label="Tokens a day (UTC)", min_value=1,
                                            required=False)
    slice_max_concurrency = forms.IntegerField(label="Concurrent requests", min_value=1,
                                               required=False)
    default_service_tier = forms.ChoiceField(
        label="Service tier of requests that ask for auto", choices=ServiceTier.choices,
        help_text="Default keeps a batch key on the standard tier.")
    queue_threshold_default_ms = forms.IntegerField(
        label="Wait for capacity, ms", min_value=0, max_value=20_000, required=False,
        help_text="When a request does not say (queue_threshold), it may wait this long in the "
                  "pool's queue instead of being refused: 0 or 50-20,000; empty: the "
                  "organization's default.")


class ApplicationForm(forms.ModelForm):
    """The applicant's answers. Field rules come from the model (bounds as the REST API's);
    the service validates again and its field errors are put back on this form. Country and
    region are choices: ISO 3166-1 countries, and the regions pools serve."""

    website = forms.URLField(label="Website", max_length=300, assume_scheme="https",
                             widget=forms.URLInput(attrs={"placeholder": "https://example.com"}))
    country = forms.ChoiceField(label="Country", choices=[("", "Choose a country")]
                                + list(countries))
    expected_peak_tps = forms.IntegerField(label="Expected peak tokens/s", min_value=1,
                                           max_value=10_000_000)
    expected_daily_tokens = forms.IntegerField(label="Expected daily tokens", min_value=1,
                                               max_value=10**15)
    preferred_region = forms.ChoiceField(
        label="Preferred region",
        help_text="Where your traffic should be served: the regions the fast tier runs in.")

    class Meta:
        model = Application
        fields = list(APPLICANT_FIELDS)
        widgets = {"use_case_description": forms.Textarea(attrs={"rows": 4})}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        regions = pool_regions()
        current = self.initial.get("preferred_region")
        if current and current not in regions:  # an earlier answer stays selectable
            regions.append(current)
        self.fields["preferred_region"].choices = [(r, r) for r in regions]


class ApplicationUpdateForm(ApplicationForm):
    response = forms.CharField(label="Your answer to the reviewer", required=False,
                               widget=forms.Textarea(attrs={"rows": 3}))


class QuotaRequestForm(forms.Form):
    pool = forms.ModelChoiceField(label="Pool", queryset=CapacityPool.objects.order_by("model"))
    guaranteed_tps = forms.IntegerField(label="Guaranteed tokens/s", min_value=1,
                                        max_value=QUOTA_REQUEST_TPS_MAX)
    burst_tps = forms.IntegerField(label="Burst tokens/s", min_value=1,
                                   max_value=QUOTA_REQUEST_TPS_MAX)
    daily_tokens = forms.IntegerField(label="Daily tokens", min_value=1,
                                      max_value=QUOTA_REQUEST_DAILY_TOKENS_MAX)
    max_concurrency = forms.IntegerField(label="Concurrent requests", min_value=1,
                                         max_value=QUOTA_REQUEST_CONCURRENCY_MAX)
    reason = forms.CharField(label="Why you need it", max_length=4000,
                             widget=forms.Textarea(attrs={"rows": 3}))

    def clean(self):
        cleaned = super().clean()
        if (cleaned.get("burst_tps") or 0) < (cleaned.get("guaranteed_tps") or 0):
            self.add_error("burst_tps", "Must be at least the guaranteed tokens/s.")
        return cleaned


# A year of hourly rows per key is the most one export covers; more is asked in pieces.
USAGE_EXPORT_MAX_DAYS = 366


class UsageExportForm(forms.Form):
    start = forms.DateField(label="From (UTC)", widget=forms.DateInput(attrs={"type": "date"}))
    end = forms.DateField(label="To (UTC, inclusive)",
                          widget=forms.DateInput(attrs={"type": "date"}))

    def clean(self):
        cleaned = super().clean()
        start, end = cleaned.get("start"), cleaned.get("end")
        if start and end:
            if end < start:
                self.add_error("end", "The end date is before the start date.")
            elif (end - start).days >= USAGE_EXPORT_MAX_DAYS:
                self.add_error("end", f"Export at most {USAGE_EXPORT_MAX_DAYS} days at once.")
        return cleaned


class SpendCapForm(forms.Form):
    spend_cap_dollars = forms.DecimalField(label="Monthly spend cap (USD, 0 = none)",
                                           min_value=0, max_value=1_000_000_000,
                                           max_digits=12, decimal_places=2)
    alert_thresholds = forms.CharField(
        label="Alert at (% of the cap)", max_length=100,
        help_text="Comma-separated percentages, e.g. 50, 80, 100.")

    def clean_alert_thresholds(self) -> list[int]:
        try:
            values = [int(part) for part in self.cleaned_data["alert_thresholds"].split(",")
                      if part.strip()]
        except ValueError:
            raise forms.ValidationError("Use whole numbers separated by commas.") from None
        if not values or any(v < 1 or v > 100 for v in values):
            raise forms.ValidationError("Each threshold is a percentage between 1 and 100.")
        return values


class BookingForm(forms.Form):
    """A window to book in one pool (the input TPS field only where the pool meters input)."""

    starts_at = forms.DateTimeField(
        label="Starts (UTC)", widget=forms.DateTimeInput(
            attrs={"type": "datetime-local", "step": 900}, format="%Y-%m-%dT%H:%M"),
        help_text="On the quarter hour, at least a minute and at most 60 days ahead.")
    ends_at = forms.DateTimeField(
        label="Ends (UTC)", widget=forms.DateTimeInput(
            attrs={"type": "datetime-local", "step": 900}, format="%Y-%m-%dT%H:%M"),
        help_text="1 hour to 7 days after the start.")
    output_tps = forms.IntegerField(label="Extra guaranteed output tokens/s", min_value=1,
                                    max_value=BOOKING_TPS_MAX)
    input_tps = forms.IntegerField(label="Extra guaranteed input tokens/s", min_value=0,
                                   max_value=BOOKING_TPS_MAX, initial=0, required=False)
    extra_daily_tokens = forms.IntegerField(
        label="Extra daily tokens", min_value=0, max_value=BOOKING_DAILY_TOKENS_MAX, initial=0,
        required=False, help_text="Added to the day's quota while the window is in force.")

    def __init__(self, *args, pool: CapacityPool, **kwargs):
        super().__init__(*args, **kwargs)
        if not pool.meters_input_apart:
            del self.fields["input_tps"]

    def ask(self) -> BookingAsk:
        data = self.cleaned_data
        return BookingAsk(starts_at=data["starts_at"], ends_at=data["ends_at"],
                          output_tps=data["output_tps"], input_tps=data.get("input_tps") or 0,
                          extra_daily_tokens=data.get("extra_daily_tokens") or 0)
