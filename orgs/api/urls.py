from django.urls import path

from orgs.api import views

urlpatterns = [
    path("orgs/", views.OrgListApi.as_view(), name="api-orgs"),
    path("orgs/<int:org_id>/", views.OrgDetailApi.as_view(), name="api-org"),
    path("orgs/<int:org_id>/transitions/", views.OrgTransitionApi.as_view(),
         name="api-org-transition"),
    path("orgs/<int:org_id>/members/", views.MemberListApi.as_view(), name="api-org-members"),
    path("orgs/<int:org_id>/members/<int:member_id>/", views.MemberDetailApi.as_view(),
         name="api-org-member"),
    path("orgs/<int:org_id>/invitations/", views.InvitationListApi.as_view(),
         name="api-org-invitations"),
    path("orgs/<int:org_id>/invitations/<int:invitation_id>/revoke/",
         views.InvitationRevokeApi.as_view(), name="api-org-invitation-revoke"),
    path("invitations/accept/", views.InvitationAcceptApi.as_view(), name="api-invitation-accept"),
    path("orgs/<int:org_id>/api-keys/", views.ApiKeyListApi.as_view(), name="api-org-keys"),
    path("orgs/<int:org_id>/api-keys/<int:key_id>/revoke/", views.ApiKeyRevokeApi.as_view(),
         name="api-org-key-revoke"),
    path("orgs/<int:org_id>/api-keys/<int:key_id>/limits/", views.ApiKeyLimitsApi.as_view(),
         name="api-org-key-limits"),
]
