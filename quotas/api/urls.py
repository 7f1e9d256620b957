from django.urls import path

from quotas.api import quota_requests, views

urlpatterns = [
    path("pools/", views.PoolListApi.as_view(), name="api-pools"),
    path("pools/<int:pool_id>/", views.PoolDetailApi.as_view(), name="api-pool"),
    path("pools/<int:pool_id>/capacity/", views.PoolCapacityApi.as_view(),
         name="api-pool-capacity"),
    path("allocations/", views.AllocationListApi.as_view(), name="api-allocations"),
    path("allocations/<int:allocation_id>/", views.AllocationDetailApi.as_view(),
         name="api-allocation"),
    path("allocations/<int:allocation_id>/end/", views.AllocationEndApi.as_view(),
         name="api-allocation-end"),
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
