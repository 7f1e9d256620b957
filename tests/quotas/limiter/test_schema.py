"""The engine's Lua and Python agree on one declaration (quotas/limiter/schema.py): stored fields,
key names, KEYS and ARGV layouts, and replies. No Redis needed: this reads the sources."""

import ast
import re
from pathlib import Path

import pytest

from quotas.limiter import schema
from quotas.limiter.connection import SCRIPTS_DIR, script_source

LIMITER = Path(schema.__file__).parent
LUA = {path.stem: path.read_text() for path in SCRIPTS_DIR.glob("*.lua")}
SHARED = {name for name in LUA if name.startswith("_")}
# Values a script compares or stores (not names of anything): org status and suspension reason
# (set by the orgs app), reservation states, flags, Redis range syntax, the hash tag's end, and
# Lua's select('#').
VALUES = {"active", "payment", "open", "settled", "spilled", "1", "(", "+inf", "-inf", ":", "}",
          "#", "auto", "priority", "default", "fast", "unknown", "org", "key", "input", "output",
          "released", "expired", "0", "."}
OUTCOMES = {"allowed", "duplicate", "unsynced", "invalid_api_key", "payment_required",
            "org_not_active", "no_allocation", "request_id_conflict", "spend_cap_reached",
            "concurrency_exceeded", "daily_quota_exhausted", "tps_exceeded",
            "pool_capacity_exhausted", "tier_mismatch", "spilled", *schema.LEASE_STATUSES}


def _code(source: str) -> str:
    return re.sub(r"--[^\n]*", "", source)


def _script_text(name: str) -> str:
    """A script's own code and the shared parts it loads."""
    parts = ["_common", *(f"_{p}" for p in schema.SCRIPTS[name].shared)]
    return _code("\n".join(LUA[p] for p in [*parts, name]))


def test_every_lua_file_is_a_declared_script_or_a_shared_part_one_uses():
    used = {"_common"} | {f"_{p}" for s in schema.SCRIPTS.values() for p in s.shared}
    assert set(LUA) == set(schema.SCRIPTS) | used


@pytest.mark.parametrize("name", sorted(schema.SCRIPTS))
def test_every_schema_name_a_script_says_is_declared(name):
    # lua_expand raises LookupError on any F/KEY/K/A name the schema does not declare.
    source = script_source(name)
    assert not re.search(r"(?<![\w.])(F|KEY|K|A)\.\w", _code(source))


def test_scripts_use_no_bare_field_or_key_names_and_no_argv_offsets():
    for name, source in LUA.items():
        code = _code(source)
        literals = set(re.findall(r"'([^']*)'", code))
        # Commands and options are upper case, patterns hold %, messages hold spaces.
        names = {v for v in literals if not (v.isupper() or "%" in v or " " in v)}
        assert names <= VALUES | OUTCOMES, (name, names - VALUES - OUTCOMES)
        offsets = re.findall(r"\b(?:KEYS|ARGV)\[[^\]]*\]", code)
        # The one exception: every key's hash tag is read from the first key.
        assert offsets == (["KEYS[1]"] if name == "_common" else []), (name, offsets)


def test_every_declared_field_and_key_name_is_used():
    code = _code("\n".join(LUA.values()))
    python = "\n".join(p.read_text() for p in LIMITER.glob("*.py"))
    for group, fields in schema.FIELDS.items():
        whole = re.search(rf"\bF\.{group}\b(?!\.)", code)
        for field in fields._fields:
            assert whole or f"F.{group}.{field}" in code, f"F.{group}.{field} is never used"
    for name in schema.KEY._fields:
        assert f"KEY.{name}" in code or f"KEY.{name}" in python, f"KEY.{name} is never used"


@pytest.mark.parametrize("name", [n for n, s in schema.SCRIPTS.items() if s.reply])
def test_replies_name_exactly_the_fields_of_their_dataclass(name):
    declared = set(schema.field_names(schema.SCRIPTS[name].reply))
    built = set()
    for table in re.findall(r"\breply\{([^}]*)\}", _script_text(name)):
        names = set(re.findall(r"(\w+)\s*=", table))
        assert names <= declared, names - declared
        built |= names
    assert built == declared  # every field is built by some reply, none is decoded blind


@pytest.mark.parametrize("name", [n for n, s in schema.SCRIPTS.items() if s.item])
def test_list_items_are_read_by_their_declared_fields(name):
    declared = {"key", *schema.field_names(schema.SCRIPTS[name].item)}
    used = set(re.findall(r"\bitem\.(\w+)", _script_text(name)))
    assert used and used <= declared, used - declared


def test_org_publish_reads_its_json_by_the_declared_fields():
    used = set(re.findall(r"\bstate\.(\w+)", _code(LUA["org_publish"])))
    assert used == set(schema.OrgPublishState._fields)


def test_python_names_hash_fields_only_through_the_schema():
    """No string literal as a field in the engine's and the bridge's hash commands."""
    paths = [*LIMITER.glob("*.py"), LIMITER.parent / "publish.py"]
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in {"hset", "hget", "hmget", "hdel", "hincrby"}):
                literals = [a for a in node.args[1:] if isinstance(a, ast.Constant)
                            and isinstance(a.value, str)]
                assert not literals, f"{path.name}:{node.lineno}"


def test_a_reply_decodes_by_name_with_the_declared_defaults():
    decision = schema.reply_decode(schema.Decision, ["tps_exceeded", 7, 9, 100, None, *[0] * 9,
                                                     60, 40, "auto", "org", "output", *[0] * 8])
    assert (decision.outcome, decision.org_id, decision.api_key_id) == ("tps_exceeded", 7, 9)
    assert decision.retry_after_ms is None and not decision.allowed
    with pytest.raises(ValueError):  # a reply one slot short is an error, not a shifted decode
        schema.reply_decode(schema.Decision, ["allowed", 7, 9])


def test_stored_values_must_name_every_field_of_the_hash():
    with pytest.raises(ValueError):
        schema.stored_values(schema.POOL, headroom_rate=1)


def test_a_reply_by_field_name_is_written_as_the_list_in_the_layouts_order():
    source = "return reply{scope = f(a, {b, 'c,}'}) -- a comment, with a comma\n, outcome = 'x'}"
    expanded = schema._replies_expand("authorize", schema.Decision, source)
    values = ["('x')", "false", "false", "0", "false", *["0"] * 11, "false",
              "(f(a, {b, 'c,}'})) or false", "false", *["0"] * 8]
    assert expanded == "return {" + ", ".join(values) + "}"
    for wrong in ("reply{outcome = 'x', allowed = true}", "reply{org_id = 1}"):
        with pytest.raises(LookupError):
            schema._replies_expand("authorize", schema.Decision, wrong)
