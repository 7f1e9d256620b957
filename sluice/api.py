"""What every REST API view shares besides its errors (sluice/error_responses.py answers those):
the one way to read input, and OpenAI's page of time buckets."""

import time

from rest_framework import serializers

from sluice.time_buckets import BucketError, bucket_page


class RequiredBooleanField(serializers.BooleanField):
    """A boolean the client must give. DRF reads a form body without the field as false (an
    unticked HTML checkbox), so a form PUT of auto-admission without `auto_admit` turned it
    off: here it is missing, a 400 (found by schemathesis's negative data)."""

    default_empty_html = serializers.empty


def break_bookings_field(help_text: str) -> serializers.ListField:
    """The ids of the bookings an operator names as broken by a change (its refusal answered
    them in `details.conflicts`): they are cancelled with a full refund and a notice."""
    return serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=2**63 - 1), required=False,
        default=list, max_length=10_000, help_text=help_text)


def validated_input(serializer_class, data, *, partial: bool = False,
                    context: dict | None = None) -> dict:
    """Parse a view's input with its Input serializer (`context`: what its checks need to
    know besides the input); malformed input raises (-> 400). The one way every API view reads
    its body and query parameters."""
    serializer = serializer_class(data=data, partial=partial, context=context or {})
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


class BucketQueryInput(serializers.Serializer):
    """The time window of OpenAI's organization Usage and Costs APIs (sluice/time_buckets.py)."""

    start_time = serializers.IntegerField(min_value=0, help_text="Unix seconds, inclusive.")
    end_time = serializers.IntegerField(
        min_value=0, required=False,
        help_text="Unix seconds, exclusive. Default: now.")
    limit = serializers.IntegerField(required=False, help_text="Buckets per page.")
    page = serializers.CharField(required=False, max_length=40,
                                 help_text="`next_page` of the previous response.")

    # (default, maximum) buckets per page when not the width's usual ones.
    page_limits: tuple[int, int] | None = None

    def validate(self, data):
        data.setdefault("end_time", int(time.time()))
        try:
            data["window"] = bucket_page(
                width=data.get("bucket_width", "1d"), start_time=data["start_time"],
                end_time=data["end_time"], limit=data.get("limit"), page=data.get("page"),
                limits=self.page_limits)
        except BucketError as exc:
            raise serializers.ValidationError({exc.field: [exc.message]}) from exc
        return data


def bucket_page_output(name: str, result: serializers.Serializer) -> serializers.Serializer:
    """For OpenAPI: OpenAI's page of time buckets (sluice/time_buckets.py) around `result`."""
    from drf_spectacular.utils import inline_serializer

    bucket = inline_serializer(f"{name}Bucket", {
        "object": serializers.ChoiceField(choices=["bucket"]),
        "start_time": serializers.IntegerField(), "end_time": serializers.IntegerField(),
        "results": result})
    return inline_serializer(f"{name}Page", {
        "object": serializers.ChoiceField(choices=["page"]),
        "data": serializers.ListSerializer(child=bucket),
        "has_more": serializers.BooleanField(),
        "next_page": serializers.CharField(allow_null=True)})
