"""Operator access for the REST API: staff may read; changing something needs the model
permission, so read-only support staff (console group "support") cannot act through the API
any more than through the console."""

from rest_framework.permissions import SAFE_METHODS, BasePermission

from orgs.selectors import user_is_operator
from sluice.errors import PermissionDenied


def operator_access(change_perm: str) -> type[BasePermission]:
    class OperatorAccess(BasePermission):
        def has_permission(self, request, view) -> bool:
            if not (request.user and request.user.is_authenticated):
                return False  # DRF answers 401
            if not user_is_operator(request.user):
                raise PermissionDenied("This endpoint is for operators.",
                                       code="operator_permission_required")
            if request.method not in SAFE_METHODS and not request.user.has_perm(change_perm):
                raise PermissionDenied("This action needs operator permissions.",
                                       code="operator_permission_required")
            return True

    OperatorAccess.__name__ = f"OperatorAccess[{change_perm}]"
    return OperatorAccess
