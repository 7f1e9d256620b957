"""Sign-up, sign-in, email verification and invitations: the pages before an org is chosen."""

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model, login
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.urls import reverse_lazy
from django.utils.encoding import force_str
from django.utils.http import urlsafe_base64_decode
from django.views.decorators.http import require_POST

from orgs.services import invitation_accept
from portal.forms import AccountForm, LoginForm, OrgApplyForm, PasswordResetForm, SignUpForm
from portal.selectors import membership_get, memberships_for_user
from portal.services import (
    account_join,
    account_signup,
    email_verification_send,
    email_verify,
    org_apply,
)
from sluice.client_address import request_client_address
from sluice.errors import DomainError
from sluice.login_throttle import device_remember
from sluice.rate_limits import rate_limit_spend

User = get_user_model()
LAST_ORG_SESSION_KEY = "portal_org"


def _rate_exceeded(request, form, *, scope: str, rate, what: str) -> bool:
    """Counts one `scope` event of the client's address; over `rate`, the form says so."""
    wait = rate_limit_spend(scope=scope, identity=request_client_address(request), rate=rate)
    if wait:
        form.add_error(None, f"Too many {what} from your network. Try again in "
                             f"{-(-wait // 60)} minutes.")
    return bool(wait)


def signup(request):
    if request.user.is_authenticated:
        return redirect("portal:home")
    form = SignUpForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        if _rate_exceeded(request, form, scope="signup", rate=settings.SIGNUP_RATE,
                          what="sign-ups"):
            return render(request, "portal/signup.html", {"form": form}, status=429)
        try:
            user, org = account_signup(email=form.cleaned_data["email"],
                                       password=form.cleaned_data["password"],
                                       org_name=form.cleaned_data["org_name"])
        except DomainError as error:
            form.add_error("email" if error.code == "email_taken" else None, error.message)
        else:
            login(request, user, backend="django.contrib.auth.backends.ModelBackend")
            messages.success(request, f"Welcome! {org.name} has applied for access. "
                                      f"We sent a confirmation link to {user.email}.")
            return redirect("portal:status", org.slug)
    return render(request, "portal/signup.html", {"form": form})


class LoginView(auth_views.LoginView):
    template_name = "portal/login.html"
    authentication_form = LoginForm
    redirect_authenticated_user = True

    def form_valid(self, form):
        response = super().form_valid(form)
        device_remember(request=self.request, response=response,
                        username=form.get_user().get_username())
        return response


class PasswordResetView(auth_views.PasswordResetView):
    template_name = "portal/password_reset.html"
    form_class = PasswordResetForm  # the email leaves after the response (portal/services.py)
    success_url = reverse_lazy("portal:password_reset_done")

    def form_valid(self, form):
        if _rate_exceeded(self.request, form, scope="password-reset",
                          rate=settings.PASSWORD_RESET_RATE, what="password reset requests"):
            return self.render_to_response(self.get_context_data(form=form), status=429)
        return super().form_valid(form)


class PasswordResetConfirmView(auth_views.PasswordResetConfirmView):
    template_name = "portal/password_reset_confirm.html"
    success_url = reverse_lazy("portal:password_reset_complete")


@login_required
def home(request):
    """The user's last org, else their first, else the form to apply with a new one."""
    memberships = list(memberships_for_user(user=request.user))
    slugs = [m.org.slug for m in memberships]
    last = request.session.get(LAST_ORG_SESSION_KEY)
    if last in slugs:
        return redirect("portal:status", last)
    if slugs:
        return redirect("portal:status", slugs[0])
    return render(request, "portal/no_org.html", {"form": OrgApplyForm()})


@login_required
def org_switch(request):
    membership = membership_get(user=request.user, slug=request.GET.get("org", ""))
    return redirect("portal:status", membership.org.slug)


@login_required
@require_POST
def org_new(request):
    form = OrgApplyForm(request.POST)
    if not form.is_valid():
        return render(request, "portal/no_org.html", {"form": form}, status=400)
    org = org_apply(name=form.cleaned_data["name"], user=request.user)
    messages.success(request, f"{org.name} has applied for access.")
    return redirect("portal:status", org.slug)


def email_verify_view(request, uidb64: str, token: str):
    try:
        user = User.objects.get(pk=force_str(urlsafe_base64_decode(uidb64)))
    except (User.DoesNotExist, ValueError, TypeError, OverflowError):
        user = None
    verified = user is not None and email_verify(user=user, token=token)
    return render(request, "portal/email_verified.html", {"verified": verified},
                  status=200 if verified else 400)


@login_required
@require_POST
def email_verification_resend(request):
    email_verification_send(user=request.user)
    messages.info(request, f"We sent a new confirmation link to {request.user.email}.")
    return redirect("portal:home")


def invitation_accept_view(request, token: str):
    """Signed in: accept. Not signed in: sign in first, or create the account that joins."""
    form = AccountForm(request.POST or None) if not request.user.is_authenticated else None
    if request.method != "POST" or (form is not None and not form.is_valid()):
        return render(request, "portal/invitation.html", {"form": form},
                      status=400 if request.method == "POST" else 200)
    if form is not None and _rate_exceeded(request, form, scope="signup",
                                           rate=settings.SIGNUP_RATE, what="sign-ups"):
        return render(request, "portal/invitation.html", {"form": form}, status=429)
    try:
        if form is None:
            membership = invitation_accept(token=token, user=request.user)
        else:
            membership = account_join(email=form.cleaned_data["email"],
                                      password=form.cleaned_data["password"],
                                      invitation_token=token)
            login(request, membership.user,
                  backend="django.contrib.auth.backends.ModelBackend")
    except DomainError as error:
        if form is not None and error.code == "email_taken":
            form.add_error("email", f"{error.message} Sign in to accept the invitation.")
            return render(request, "portal/invitation.html", {"form": form}, status=409)
        return render(request, "portal/invitation.html", {"error": error.message},
                      status=error.status)
    messages.success(request, f"You joined {membership.org.name} as {membership.role}.")
    return redirect("portal:status", membership.org.slug)
