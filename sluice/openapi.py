"""How the REST API describes itself (drf-spectacular, REST_FRAMEWORK["DEFAULT_SCHEMA_CLASS"]).

Three things the stock AutoSchema gets wrong for views written the house way:

- Component names. Views nest their serializers as `InputSerializer` / `FilterSerializer`, and
  drf-spectacular names a component after the class alone, so fourteen different bodies became
  one `InputRequest` (POST /api/v1/orgs/ documented an allocation). A nested serializer with a
  generic name is named after its view instead: `OrgListApi.InputSerializer` -> `OrgListInput`.
- Error answers. Every error is the one shape (sluice/errors.py), documented once as the
  `Error` component and listed on every operation for the codes it can answer: 400 (a body or
  query parameters to validate), 401 and 403 (every view needs a credential and checks a
  permission), 404 (an object in the path), 415 (a body), 429 (a throttled view). Codes that
  depend on the business (409 illegal transitions, 422 capacity) are named by the view with
  `errors(...)`.
- Pagination is read from the view's `pagination_class` (sluice/pagination.py), which plain
  APIViews declare when they answer pages.
"""

from drf_spectacular.openapi import AutoSchema as SpectacularAutoSchema
from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers

GENERIC_SERIALIZER_NAMES = frozenset({"InputSerializer", "FilterSerializer", "OutputSerializer"})
VIEW_SUFFIXES = ("Api", "View")

ERROR_DESCRIPTIONS = {
    400: "Malformed or invalid input (`invalid_input` with `fields`, `malformed_request`).",
    401: "No credential, or one that is invalid or revoked.",
    403: "The credential may not do this (`permission_denied`), or the session's CSRF check "
         "failed.",
    404: "No such object, or one of another organization (`not_found`).",
    409: "The object's state forbids it (`illegal_transition`, `conflict`, ...).",
    415: "The body is not JSON, a form or multipart.",
    422: "Well-formed but refused by a business rule (`capacity_exhausted`, ...; see "
         "`details`).",
    429: "Too many requests with this credential (`throttled`; see `Retry-After`).",
    502: "A service Sluice depends on (Stripe) failed or is not configured.",
}


class ErrorDetail(serializers.Serializer):
    code = serializers.CharField(help_text="Stable and machine-readable.")
    message = serializers.CharField(help_text="For people; may change.")
    fields = serializers.DictField(required=False,
                                   help_text="Only when input was wrong: each bad field's "
                                             "problems, by name.")
    details = serializers.DictField(required=False,
                                    help_text="Only when a refusal carries facts to act on.")


class Error(serializers.Serializer):
    """The one error shape of every API answer that is not a success (sluice/errors.py)."""

    error = ErrorDetail()


def errors(*codes: int) -> dict:
    """`responses` entries for error codes a view names itself: {**errors(409, 422)}."""
    return {code: OpenApiResponse(Error, description=ERROR_DESCRIPTIONS[code]) for code in codes}


class AutoSchema(SpectacularAutoSchema):
    def get_serializer_name(self, serializer, direction):
        cls = serializer.__class__
        owner, _, name = cls.__qualname__.rpartition(".")
        if name not in GENERIC_SERIALIZER_NAMES or not owner:
            return cls.__name__
        owner = owner.rpartition(".")[2]
        for suffix in VIEW_SUFFIXES:
            owner = owner.removesuffix(suffix)
        return owner + name.removesuffix("Serializer")

    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction)
        for code in self._error_codes():
            if str(code) not in responses:
                responses[str(code)] = self._get_response_for_code(
                    errors(code)[code], str(code), direction=direction)
        return dict(sorted(responses.items()))

    def _error_codes(self) -> list[int]:
        if not self.view.permission_classes:
            return []  # documents its answers itself (the gateway hook)
        has_body = self.method in ("POST", "PUT", "PATCH")
        has_query = any(p["in"] == "query" for p in self._get_parameters())
        codes = [401, 403]
        if has_body or has_query:
            codes.append(400)
        if "{" in self.path:
            codes.append(404)
        if has_body:
            codes.append(415)
        if self.view.throttle_classes:
            codes.append(429)
        return codes
