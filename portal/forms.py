from django import forms
from django.contrib.auth import get_user_model, password_validation

from orgs.models import Role
from sluice.auth_forms import ThrottledAuthenticationForm


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


class OrgApplyForm(forms.Form):
    name = forms.CharField(label="Organization name", max_length=200)


class InviteForm(forms.Form):
    email = forms.EmailField(label="Email address")
    role = forms.ChoiceField(label="Role", choices=Role.choices, initial=Role.DEVELOPER)


class RoleForm(forms.Form):
    role = forms.ChoiceField(label="Role", choices=Role.choices)


class ApiKeyCreateForm(forms.Form):
    name = forms.CharField(label="Key name", max_length=100,
                           help_text="Where the key is used, e.g. “production voice agent”.")
