"""Property test of agent-loop-v1: the reply schema (what constrained decoding enforces) and the parser
accept the same replies.

Instances come from a small schema-driven Hypothesis strategy written here for the keyword subset that
pydantic writes for the declared tools (``$ref``/``$defs``, ``oneOf`` with a ``discriminator``, ``anyOf``
for ``null``); a keyword outside it fails the test. Every instance is checked by jsonschema (an independent
validator) and must parse to an action whose serialisation is schema-valid again. The one difference the
schema cannot express is a blank string where the action needs text (an answer, a plan goal's title):
xgrammar ignores ``maxLength`` next to a ``pattern``, so "not blank" is checked by the parser alone, and
such a reply gets a PolicyOutputError naming the field.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from holodesk.core.actions import Point
from holodesk.errors import PolicyOutputError
from holodesk.policy.contract import tool_names
from holodesk.policy.registry import get_protocol

P = get_protocol("agent-loop-v1")
SCHEMA = P.json_schema()
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
POINTER = Point(500, 500)  # where drag_to_desktop starts

_ALLOWED_KEYWORDS = {
    "$defs", "$ref", "title", "description", "default", "type", "properties", "required", "additionalProperties",
    "anyOf", "oneOf", "discriminator", "const", "enum", "minimum", "maximum", "exclusiveMinimum",
    "minLength", "maxLength", "items", "minItems", "maxItems",
}


def from_schema(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Hypothesis strategy for instances of ``schema`` (a node of :data:`SCHEMA`)."""
    unknown = set(schema) - _ALLOWED_KEYWORDS
    assert not unknown, f"schema keyword(s) outside the simple subset: {unknown}"
    if "$ref" in schema:
        return st.deferred(lambda: from_schema(SCHEMA["$defs"][schema["$ref"].rsplit("/", 1)[1]]))
    for key in ("oneOf", "anyOf"):
        if key in schema:
            return st.one_of([from_schema(s) for s in schema[key]])
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kind = schema["type"]
    if kind == "null":
        return st.none()
    if kind == "boolean":
        return st.booleans()
    if kind == "integer":
        return st.integers(schema.get("minimum"), schema.get("maximum"))
    if kind == "number":
        low = schema.get("exclusiveMinimum", schema.get("minimum"))
        return st.floats(low, schema.get("maximum"), allow_nan=False, allow_infinity=False,
                         exclude_min="exclusiveMinimum" in schema)
    if kind == "string":
        return st.text(min_size=schema.get("minLength", 0), max_size=min(schema.get("maxLength", 40), 40))
    if kind == "array":
        return st.lists(from_schema(schema["items"]), min_size=schema.get("minItems", 0),
                        max_size=min(schema.get("maxItems", 4), 4))
    assert kind == "object", kind
    assert schema.get("additionalProperties") is False
    props = schema["properties"]
    required = set(schema.get("required", ()))

    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        return {name: draw(from_schema(sub)) for name, sub in props.items()
                if name in required or draw(st.booleans())}

    return build()


def _blank_text(call: dict[str, Any]) -> bool:
    """True for a call whose answer or plan title is blank (see the module docstring)."""
    if call["tool_name"] == "answer":
        return not call["content"].strip()
    if call["tool_name"] == "update_plan":
        return any(not goal["title"].strip() for goal in call["goals"])
    return False


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(instance=from_schema(SCHEMA))
def test_every_schema_valid_reply_parses_and_serialises_back(instance: dict[str, Any]) -> None:
    VALIDATOR.validate(instance)  # the strategy really produces schema-valid instances
    raw = json.dumps(instance)
    call = instance["tool_call"]
    if _blank_text(call):
        try:
            P.parse(raw, pointer=POINTER)
        except PolicyOutputError as exc:
            assert exc.raw_text == raw and ("answer text" in exc.message or "goal title" in exc.message)
            return
        raise AssertionError(f"a blank text was accepted: {raw}")
    parsed = P.parse(raw, pointer=POINTER)
    again = json.loads(P.to_reply(parsed.action, thought=parsed.thought, note=parsed.note))
    VALIDATOR.validate(again)
    assert P.parse(json.dumps(again), pointer=POINTER).action == parsed.action
    assert (parsed.thought, parsed.note) == (instance["thought"], instance.get("note"))


def test_the_schema_offers_every_declared_tool() -> None:
    union = SCHEMA["properties"]["tool_call"]["oneOf"]
    offered = {SCHEMA["$defs"][ref["$ref"].rsplit("/", 1)[1]]["properties"]["tool_name"]["const"] for ref in union}
    assert offered == set(tool_names()) and {"key_down_desktop", "key_up_desktop"} <= offered
    call = {"note": None, "thought": "t", "tool_call": {"tool_name": "key_down_desktop", "key": "shift"}}
    assert not VALIDATOR.is_valid(call)  # the published field is keys, a list
