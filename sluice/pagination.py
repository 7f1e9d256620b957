from rest_framework.pagination import LimitOffsetPagination


class PaginatedApi:
    """For a plain APIView whose list answers a page, {count, next, previous, results}, by
    `paginate`. Declaring the paginator is also what tells the OpenAPI schema (sluice/openapi.py)
    that the list is a page with `limit` and `offset`, not an array."""

    pagination_class = LimitOffsetPagination


def paginate(request, view: PaginatedApi, queryset, serializer_class):
    """Limit/offset pagination for a plain APIView: {count, next, previous, results}."""
    paginator = view.pagination_class()
    page = paginator.paginate_queryset(queryset, request, view=view)
    return paginator.get_paginated_response(serializer_class(page, many=True).data)
