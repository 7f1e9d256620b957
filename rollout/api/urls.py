from django.urls import path

from rollout.api import applications, quota_requests, waves

urlpatterns = [
    *applications.urlpatterns,
    *waves.urlpatterns,
    path("orgs/<int:org_id>/quota-requests/", quota_requests.OrgQuotaRequestListApi.as_view(),
         name="api-org-quota-requests"),
    path("orgs/<int:org_id>/quota-requests/<int:request_id>/cancel/",
         quota_requests.OrgQuotaRequestCancelApi.as_view(), name="api-org-quota-request-cancel"),
    path("operator/pools/<int:pool_id>/quota-auto-approval/",
         quota_requests.PoolQuotaAutoApprovalApi.as_view(),
         name="api-operator-pool-quota-auto-approval"),
    path("operator/quota-requests/", quota_requests.OperatorQuotaRequestListApi.as_view(),
         name="api-operator-quota-requests"),
    path("operator/quota-requests/<int:request_id>/approve/",
         quota_requests.OperatorQuotaRequestApproveApi.as_view(),
         name="api-operator-quota-request-approve"),
    path("operator/quota-requests/<int:request_id>/deny/",
         quota_requests.OperatorQuotaRequestDenyApi.as_view(),
         name="api-operator-quota-request-deny"),
]
