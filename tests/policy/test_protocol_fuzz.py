"""Property tests of the holo-v1 protocol.

* Every instance valid under ``json_schema()`` parses to an action (the schema is what
  grammar-constrained decoding enforces, so this is the guarantee that constrained output never fails).
  Instances come from a small schema-driven Hypothesis strategy written here; it knows only the simple
  keyword subset the schema is meant to use, so a keyword outside it fails the test (keeps the schema
  simple enough for xgrammar / vLLM structured outputs).
* Every text, arbitrary or JSON-ish, gives a ParsedReply or a PolicyOutputError, never another exception.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from holodesk.core.actions import Answer, Done
from holodesk.errors import PolicyOutputError
from holodesk.policy.registry import get_protocol
from holodesk.policy.reply import ParsedReply

P = get_protocol("holo-v1")
SCHEMA = P.json_schema()
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)

_ALLOWED_KEYWORDS = {
    "$schema", "title", "type", "properties", "required", "additionalProperties", "anyOf", "const",
    "enum", "minimum", "maximum", "exclusiveMinimum", "minLength", "maxLength", "items", "minItems",
    "maxItems",
}


def from_schema(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Hypothesis strategy for instances of the simple JSON Schema subset used by holo-v1."""
    unknown = set(schema) - _ALLOWED_KEYWORDS
    assert not unknown, f"schema keyword(s) outside the simple subset: {unknown}"
    if "anyOf" in schema:
        return st.one_of([from_schema(s) for s in schema["anyOf"]])
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kind = schema["type"]
    if kind == "null":
        return st.none()
    if kind == "integer":
        return st.integers(schema.get("minimum"), schema.get("maximum"))
    if kind == "number":
        low = schema.get("exclusiveMinimum", schema.get("minimum"))
        return st.floats(
            low, schema.get("maximum"), allow_nan=False, allow_infinity=False,
            exclude_min="exclusiveMinimum" in schema,
        ) | st.integers(
            (low + 1) if "exclusiveMinimum" in schema else low, schema.get("maximum")
        )
    if kind == "string":
        return st.text(min_size=schema.get("minLength", 0), max_size=min(schema.get("maxLength", 40), 40))
    if kind == "array":
        return st.lists(
            from_schema(schema["items"]), min_size=schema.get("minItems", 0), max_size=schema.get("maxItems")
        )
    assert kind == "object", kind
    assert schema.get("additionalProperties") is False
    props = schema["properties"]
    required = set(schema.get("required", ()))

    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, sub in props.items():
            if name in required or draw(st.booleans()):
                out[name] = draw(from_schema(sub))
        return out

    return build()


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(instance=from_schema(SCHEMA), ascii_only=st.booleans(), indent=st.sampled_from([None, 2]))
def test_every_schema_valid_instance_parses(instance: dict[str, Any], ascii_only: bool, indent: int | None) -> None:
    VALIDATOR.validate(instance)  # the strategy really produces schema-valid instances
    raw = json.dumps(instance, ensure_ascii=ascii_only, indent=indent)
    parsed = P.parse(raw)
    call = instance["tool_call"]
    if call is None:
        assert isinstance(parsed.action, (Answer, Done))
    elif call["tool_name"] == "answer" and not call["text"].strip():
        assert parsed.action == Done("")
    else:
        # serialising the parsed action gives back a schema-valid reply with the same tool and action
        again = P.to_reply(parsed.action, thought=parsed.thought, note=parsed.note)
        VALIDATOR.validate(json.loads(again))
        assert json.loads(again)["tool_call"]["tool_name"] == call["tool_name"]
        assert P.parse(again).action == parsed.action
    assert parsed.thought == instance["thought"]
    assert parsed.note == instance["note"]


def _outcome(raw: str) -> None:
    try:
        result = P.parse(raw)
    except PolicyOutputError as exc:
        assert exc.raw_text == raw
        assert exc.message
    else:
        assert isinstance(result, ParsedReply)
        assert result.raw_text == raw
    try:
        P.parse_localization(raw)
    except PolicyOutputError as exc:
        assert exc.raw_text == raw


@settings(max_examples=500)
@given(st.text(max_size=400))
def test_arbitrary_text_never_raises_anything_else(raw: str) -> None:
    _outcome(raw)


JSONISH = st.lists(
    st.sampled_from(
        [
            *'{}[]":,\'\\ \n`0123456789.-+eE',
            "true", "null", "None", '"tool_call"', '"tool_name"', '"click"', '"x"', '"y"', '"note"',
            '"thought"', "NaN", "<think>", "</think>", "```json",
        ]
    ),
    max_size=80,
).map("".join)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=500)
@given(JSONISH)
def test_jsonish_text_never_raises_anything_else(raw: str) -> None:
    _outcome(raw)


@settings(max_examples=300)
@given(
    thought=st.one_of(st.text(max_size=20), json_values),
    note=json_values,
    call=st.one_of(
        json_values,
        st.fixed_dictionaries(
            {"tool_name": st.sampled_from(["click", "drag", "scroll", "type", "key", "wait", "answer", "done",
                                           "fly"])},
            optional={
                "x": json_values, "y": json_values, "start_x": json_values, "end_y": json_values,
                "direction": json_values, "amount": json_values, "text": json_values, "keys": json_values,
                "seconds": json_values, "message": json_values,
            },
        ),
    ),
    prefix=st.sampled_from(["", "Sure: ", "```json\n", "<think>{</think>"]),
)
def test_random_reply_objects_never_raise_anything_else(
    thought: Any, note: Any, call: Any, prefix: str
) -> None:
    _outcome(prefix + json.dumps({"note": note, "thought": thought, "tool_call": call}))


@settings(max_examples=200)
@given(instance=from_schema(SCHEMA), data=st.data())
def test_mutated_valid_replies_never_raise_anything_else(instance: dict[str, Any], data: st.DataObject) -> None:
    raw = json.dumps(instance)
    cut = data.draw(st.integers(0, len(raw)))
    insert = data.draw(st.text(alphabet='{}"\',:[] x1', max_size=3))
    _outcome(raw[:cut] + insert + raw[cut:])
    _outcome(raw[:cut])
    _outcome(raw.replace('"', "'"))
