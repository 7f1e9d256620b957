from rest_framework.pagination import LimitOffsetPagination


def paginate(request, view, queryset, serializer_class):
    """Limit/offset pagination for a plain APIView: {count, next, previous, results}."""
    paginator = LimitOffsetPagination()
    page = paginator.paginate_queryset(queryset, request, view=view)
    return paginator.get_paginated_response(serializer_class(page, many=True).data)
