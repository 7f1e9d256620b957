"""Authorize's parser has a fast path for well-formed bodies beside the per-field one that
names every malformed field. The fast path repeats the rules for speed: these tests keep the
two from drifting (every field with every odd value, every field missing, and bodies that
hypothesis makes up)."""

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quotas.hook.inputs import (
    BadInput,
    _authorize_input_checked,
    _authorize_input_fast,
    authorize_input,
)

VALID = {"request_id": "req-1", "api_key": "sk_0123456789ab_secret", "model": "gpt-5.6-sol",
         "region": "us-east", "input_tokens": 200, "max_output_tokens": 300, "dry_run": False,
         "service_tier": "auto"}
ODD_VALUES = [None, "", "x", "a" * 51, "a" * 101, "a" * 129, "a" * 257, "bad id!", "req.2:ok-_",
              0, 1, -1, 10_000_000, 10_000_001, 1.5, True, False, [], {}, "auto", "priority",
              "default", "flex", "200"]


def checked(body):
    try:
        return _authorize_input_checked(body)
    except BadInput:
        return None


def assert_agree(body):
    fast = _authorize_input_fast(body)
    assert fast == checked(body)  # the same input, or both refuse (the fast path says None)


@pytest.mark.parametrize("field, value", list(itertools.product([*VALID, "extra"], ODD_VALUES)))
def test_every_field_with_every_odd_value(field, value):
    assert_agree({**VALID, field: value})


@pytest.mark.parametrize("missing", list(VALID))
def test_every_field_missing(missing):
    assert_agree({k: v for k, v in VALID.items() if k != missing})


@pytest.mark.parametrize("body", [None, [], "text", 3, [VALID]])
def test_bodies_that_are_not_objects(body):
    assert _authorize_input_fast(body) is None
    with pytest.raises(BadInput) as refused:
        authorize_input(body)
    assert refused.value.code == "malformed_request"


scalars = st.one_of(st.none(), st.booleans(), st.integers(-2, 10_000_002),
                    st.floats(allow_nan=False), st.text(max_size=130),
                    st.sampled_from(["auto", "priority", "default", "req-1"]))


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.sampled_from([*VALID, "extra"]), scalars))
def test_made_up_bodies(body):
    assert_agree(body)


@settings(max_examples=200, deadline=None)
@given(st.fixed_dictionaries({k: st.one_of(st.just(v), scalars) for k, v in VALID.items()}))
def test_made_up_bodies_near_valid(body):
    assert_agree(body)


def test_a_refusal_names_every_malformed_field():
    with pytest.raises(BadInput) as refused:
        authorize_input({**VALID, "input_tokens": -1, "service_tier": "flex", "model": ""})
    assert set(refused.value.fields) == {"input_tokens", "service_tier", "model"}
