"""The usage parser's fast path must accept exactly what the per-field parser accepts, and build
the same event: it duplicates the rules for speed, so this test keeps the two from drifting."""

import itertools

import pytest

from quotas.hook.inputs import BadInput, _usage_event, _usage_event_fast

VALID = {"request_id": "req-1", "reservation_id": "rsv_1_2_3_abcdefabcdefabcdefab",
         "input_tokens": 10, "output_tokens": 20, "status": "completed",
         "started_at": "2026-11-29T10:00:00+00:00",
         "first_token_at": "2026-11-29T10:00:00.200000+00:00",
         "finished_at": "2026-11-29T10:00:01+00:00"}

ODD_VALUES = [None, "", "x", "a" * 129, "bad id!", 0, -1, 10**15, 1.5, True, [], {},
              "2026-11-29T10:00:00", "2026-11-29T09:00:00+00:00", "2026-11-29T11:00:00+00:00",
              "not a date", "failed", "cancelled", "req.2:ok-_"]


def slow(item):
    try:
        event, errors = _usage_event(item)
    except BadInput:
        return None
    return None if errors else event


@pytest.mark.parametrize("field, value",
                         list(itertools.product([*VALID, "extra"], ODD_VALUES)))
def test_fast_path_agrees_with_the_per_field_parser(field, value):
    item = {**VALID, field: value}
    assert _usage_event_fast(item) == slow(item)


@pytest.mark.parametrize("missing", list(VALID))
def test_missing_fields_agree(missing):
    item = {k: v for k, v in VALID.items() if k != missing}
    assert _usage_event_fast(item) == slow(item)


def test_not_a_dict():
    for item in (None, [], "x", 1):
        assert _usage_event_fast(item) is None
