from django.contrib.auth import views as auth_views
from django.urls import path

from portal.views import accounts, application, billing, org, quota_requests, usage

app_name = "portal"

urlpatterns = [
    path("", accounts.home, name="home"),
    path("signup/", accounts.signup, name="signup"),
    path("login/", accounts.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("password-reset/", accounts.PasswordResetView.as_view(), name="password_reset"),
    path("password-reset/sent/", auth_views.PasswordResetDoneView.as_view(
        template_name="portal/password_reset_done.html"), name="password_reset_done"),
    path("password-reset/<uidb64>/<token>/", accounts.PasswordResetConfirmView.as_view(),
         name="password_reset_confirm"),
    path("password-reset/done/", auth_views.PasswordResetCompleteView.as_view(
        template_name="portal/password_reset_complete.html"), name="password_reset_complete"),
    path("verify-email/<uidb64>/<token>/", accounts.email_verify_view, name="email_verify"),
    path("verify-email/resend/", accounts.email_verification_resend, name="email_resend"),
    path("invitations/<str:token>/", accounts.invitation_accept_view, name="invitation"),
    path("switch/", accounts.org_switch, name="switch"),
    path("orgs/new/", accounts.org_new, name="org_new"),
    path("o/<slug:slug>/", org.status, name="status"),
    path("o/<slug:slug>/application/", application.application, name="application"),
    path("o/<slug:slug>/members/", org.members, name="members"),
    path("o/<slug:slug>/members/invite/", org.member_invite, name="member_invite"),
    path("o/<slug:slug>/members/<int:membership_id>/role/", org.member_role, name="member_role"),
    path("o/<slug:slug>/members/<int:membership_id>/remove/", org.member_remove,
         name="member_remove"),
    path("o/<slug:slug>/invitations/<int:invitation_id>/revoke/", org.invitation_revoke_view,
         name="invitation_revoke"),
    path("o/<slug:slug>/keys/", org.keys, name="keys"),
    path("o/<slug:slug>/keys/new/", org.key_create, name="key_create"),
    path("o/<slug:slug>/keys/<int:key_id>/revoke/", org.key_revoke, name="key_revoke"),
    path("o/<slug:slug>/quotas/", org.quotas, name="quotas"),
    path("o/<slug:slug>/usage/", usage.usage, name="usage"),
    path("o/<slug:slug>/usage/live/", usage.usage_live, name="usage_live"),
    path("o/<slug:slug>/usage/export.csv", usage.usage_export, name="usage_export"),
    path("o/<slug:slug>/quota-requests/", quota_requests.quota_requests, name="quota_requests"),
    path("o/<slug:slug>/quota-requests/new/", quota_requests.quota_request_new,
         name="quota_request_new"),
    path("o/<slug:slug>/quota-requests/<int:request_id>/cancel/",
         quota_requests.quota_request_cancel_view, name="quota_request_cancel"),
    path("o/<slug:slug>/billing/", billing.billing, name="billing"),
    path("o/<slug:slug>/billing/spend-cap/", billing.spend_cap, name="billing_spend_cap"),
    path("o/<slug:slug>/billing/payment-method/", billing.payment_method,
         name="billing_payment_method"),
    path("o/<slug:slug>/billing/invoices/<int:invoice_id>/", billing.invoice_view,
         name="billing_invoice"),
    path("o/<slug:slug>/billing/invoices/<int:invoice_id>/pdf/", billing.invoice_pdf_view,
         name="billing_invoice_pdf"),
]
