"""Validate responses against OpenAI's published Usage and Costs schemas
(tests/fixtures/openai_usage_costs_schemas.json says where they come from)."""

import json
from pathlib import Path

from jsonschema import Draft202012Validator

_DOCUMENT = json.loads((Path(__file__).parent / "fixtures" / "openai_usage_costs_schemas.json")
                       .read_text())


def openai_validate(body: dict, *, schema: str = "UsageResponse") -> None:
    validator = Draft202012Validator({"$ref": f"#/components/schemas/{schema}", **_DOCUMENT})
    validator.validate(body)
