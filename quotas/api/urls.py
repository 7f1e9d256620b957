from django.urls import path

from quotas.api import views

urlpatterns = [
    path("pools/", views.PoolListApi.as_view(), name="api-pools"),
    path("pools/<int:pool_id>/", views.PoolDetailApi.as_view(), name="api-pool"),
    path("pools/<int:pool_id>/capacity/", views.PoolCapacityApi.as_view(),
         name="api-pool-capacity"),
    path("pools/<int:pool_id>/capacity/conflicts/", views.PoolCapacityConflictsApi.as_view(),
         name="api-pool-capacity-conflicts"),
    path("allocations/", views.AllocationListApi.as_view(), name="api-allocations"),
    path("allocations/<int:allocation_id>/", views.AllocationDetailApi.as_view(),
         name="api-allocation"),
    path("allocations/<int:allocation_id>/end/", views.AllocationEndApi.as_view(),
         name="api-allocation-end"),
]
