from rest_framework import serializers
from rest_framework.pagination import LimitOffsetPagination


class StrictLimitOffsetPagination(LimitOffsetPagination):
    """`limit` (1 to max_limit) and `offset` (0 or more) as the schema documents them. DRF's
    own falls back to the defaults on anything else, so `?limit=abc` or `?offset=-5` quietly
    read as the first page: here they are a 400 like any other bad input."""

    max_limit = 500

    def get_limit(self, request):
        return self._query_int(request, self.limit_query_param, self.default_limit,
                               minimum=1, maximum=self.max_limit)

    def get_offset(self, request):
        return self._query_int(request, self.offset_query_param, 0, minimum=0)

    @staticmethod
    def _query_int(request, name: str, default: int, *, minimum: int,
                   maximum: int | None = None) -> int:
        values = request.query_params.getlist(name)
        if not values:
            return default
        field = serializers.IntegerField(min_value=minimum, max_value=maximum)
        if len(values) > 1:
            raise serializers.ValidationError({name: ["Give it once."]})
        try:
            return field.run_validation(values[0])
        except serializers.ValidationError as exc:
            raise serializers.ValidationError({name: exc.detail}) from None

    def get_schema_operation_parameters(self, view):
        parameters = super().get_schema_operation_parameters(view)
        bounds = {self.limit_query_param: {"minimum": 1, "maximum": self.max_limit},
                  self.offset_query_param: {"minimum": 0}}
        for parameter in parameters:
            parameter["schema"].update(bounds.get(parameter["name"], {}))
        return parameters


class PaginatedApi:
    """For a plain APIView whose list answers a page, {count, next, previous, results}, by
    `paginate`. Declaring the paginator is also what tells the OpenAPI schema (sluice/openapi.py)
    that the list is a page with `limit` and `offset`, not an array."""

    pagination_class = StrictLimitOffsetPagination


def paginate(request, view: PaginatedApi, queryset, serializer_class):
    """Limit/offset pagination for a plain APIView: {count, next, previous, results}."""
    paginator = view.pagination_class()
    page = paginator.paginate_queryset(queryset, request, view=view)
    return paginator.get_paginated_response(serializer_class(page, many=True).data)
