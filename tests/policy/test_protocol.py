"""holo-v1 action protocol: parser rules (F05, F07, F08, F09, F10), round trips, schema, prompts,
history messages (F21), localization."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest

from holodesk.core.actions import (
    ACTION_TYPES,
    Action,
    Answer,
    Click,
    Done,
    Drag,
    Key,
    Move,
    Plan,
    Point,
    Scroll,
    Type,
    Wait,
)
from holodesk.core.geometry import Frame, Monitor
from holodesk.errors import ActionError, PolicyOutputError, SettingsError
from holodesk.policy.base import ActionProtocol, HistoryStep, Observation
from holodesk.policy.protocol import PROTOCOL_NAMES, TOOL_NAMES
from holodesk.policy.registry import get_protocol
from holodesk.policy.reply import ParsedReply

P = get_protocol("holo-v1")


def reply(tool_call: object, thought: str = "t", note: str | None = None) -> str:
    return json.dumps({"note": note, "thought": thought, "tool_call": tool_call})


def click(x: object, y: object) -> str:
    return reply({"tool_name": "click", "x": x, "y": y})


def fails(raw: str) -> PolicyOutputError:
    with pytest.raises(PolicyOutputError) as info:
        P.parse(raw)
    assert info.value.raw_text == raw
    return info.value


ALL_ACTIONS: list[Action] = [
    Click(Point(500, 300)),
    Click(Point(0, 0), count=2),
    Click(Point(1000, 1000), button="right"),
    Click(Point(1, 999), button="middle"),
    Move(Point(250, 750)),
    Drag(Point(10, 20), Point(900, 800)),
    Scroll("down"),
    Scroll("left", 50, Point(400, 600)),
    Type("Grüße, żółw, Ελληνικά, 日本語\tand a\nnew line"),
    Key(("ctrl", "shift", "t")),
    Key(("enter",)),
    Wait(0.5),
    Wait(60),
    Answer("The total is 42 €."),
    Done(),
    Done("saved the file"),
]


# ------------------------------------------------------------------------------------- registry
def test_protocol_names_and_registry() -> None:
    assert PROTOCOL_NAMES == ("holo-v1", "agent-loop-v1")
    assert isinstance(P, ActionProtocol)
    assert get_protocol("agent-loop-v1").name == "agent-loop-v1"
    assert P.name == "holo-v1"
    assert get_protocol() is P


def test_unknown_protocol_lists_known_ones() -> None:
    with pytest.raises(SettingsError) as info:
        get_protocol("holo-v9")
    assert "holo-v9" in str(info.value)
    assert "holo-v1" in str(info.value)


# ----------------------------------------------------------------------------------- valid replies
def test_exact_reply_parses_without_warnings() -> None:
    raw = '{"note": "cart has 3 items", "thought": "Open the cart", "tool_call": ' \
          '{"tool_name": "click", "x": 500, "y": 300}}'
    parsed = P.parse(raw)
    assert parsed == ParsedReply(Click(Point(500, 300)), "Open the cart", "cart has 3 items", raw, ())


def test_markdown_fenced_json_is_accepted() -> None:
    raw = 'Here is my action:\n```json\n' + click(12, 34) + '\n```'
    parsed = P.parse(raw)
    assert parsed.action == Click(Point(12, 34))
    assert parsed.raw_text == raw
    assert any("markdown" in w for w in parsed.warnings)


def test_leading_and_trailing_prose_is_ignored() -> None:
    raw = "I will press save now. " + reply({"tool_name": "key", "keys": ["ctrl", "s"]}) + " Hope it works!"
    parsed = P.parse(raw)
    assert parsed.action == Key(("ctrl", "s"))
    assert any("outside the JSON object" in w for w in parsed.warnings)


def test_prose_with_braces_that_are_not_objects_is_ignored() -> None:
    raw = "The {OK} button is visible. " + click(700, 800)
    assert P.parse(raw).action == Click(Point(700, 800))


def test_two_different_objects_are_rejected() -> None:
    err = fails(click(1, 2) + "\n" + click(3, 4))
    assert "2 different JSON objects" in err.message


def test_the_same_object_twice_is_used_once() -> None:
    parsed = P.parse(click(1, 2) + "\n" + click(1, 2))
    assert parsed.action == Click(Point(1, 2))
    assert any("repeated 2 times" in w for w in parsed.warnings)


def test_single_quoted_python_literal_is_read() -> None:
    raw = "{'note': None, 'thought': \"it's here\", 'tool_call': {'tool_name': 'double_click', 'x': 5, 'y': 6}}"
    parsed = P.parse(raw)
    assert parsed.action == Click(Point(5, 6), count=2)
    assert parsed.thought == "it's here"
    assert parsed.note is None
    assert any("single-quoted" in w for w in parsed.warnings)


def test_single_quotes_mixed_with_json_literals_is_rejected() -> None:
    # null/true are not Python literals: the object cannot be read unambiguously.
    err = fails("{'note': null, 'thought': 'x', 'tool_call': {'tool_name': 'click', 'x': 5, 'y': 6}}")
    assert "neither valid JSON nor an unambiguous literal" in err.message


def test_trailing_comma_is_rejected() -> None:
    fails('{"note": null, "thought": "x", "tool_call": null,}')


def test_missing_closing_brace_is_rejected_not_guessed() -> None:
    raw = '{"note": null, "thought": "x", "tool_call": {"tool_name": "click", "x": 5, "y": 6}'
    err = fails(raw)
    assert "missing closing brace" in err.message


def test_missing_closing_brace_after_prose_is_rejected() -> None:
    err = fails('Sure: {"thought": "x", "tool_call": {"tool_name": "click", "x": 5, "y": 6}')
    assert "missing closing brace" in err.message


@pytest.mark.parametrize("raw", ["", "   ", "\n\t\n"])
def test_empty_reply_is_rejected(raw: str) -> None:
    assert fails(raw).message == "the reply is empty"


def test_two_thousand_exclamation_marks_are_rejected() -> None:
    raw = "!" * 2000
    err = fails(raw)
    assert "no JSON object" in err.message
    assert err.raw_text == raw


def test_unknown_tool_name_lists_the_known_tools() -> None:
    err = fails(reply({"tool_name": "launch_rocket", "x": 1, "y": 2}))
    assert "launch_rocket" in err.message
    for name in TOOL_NAMES:
        assert name in err.message
    # holo-v1 has a tool for every action kind but agent-loop-v1's plan (update_plan) and held keys, and one per click
    assert set(TOOL_NAMES) == (set(ACTION_TYPES) - {"plan", "key_down", "key_up"}
                               | {"double_click", "right_click", "middle_click"}) and "plan" not in err.message


@pytest.mark.parametrize(
    ("x", "expected"),
    [("500", 500), (" 500 ", 500), ("500.0", 500), (500.0, 500), (0.0 + 7, 7), ("+3", 3)],
)
def test_integral_coordinate_as_string_or_float_is_accepted(x: object, expected: int) -> None:
    parsed = P.parse(click(x, 250))
    assert parsed.action == Click(Point(expected, 250))
    assert any("read as" in w for w in parsed.warnings)


@pytest.mark.parametrize(
    ("x", "words"),
    [
        (500.5, "non-integral number"),
        ("500.5", "non-integral string"),
        ("five hundred", "non-numeric string"),
        ("", "non-numeric string"),
        (True, "boolean"),
        (None, "got a null"),
        ([500], "got a list"),
    ],
)
def test_bad_coordinate_type_is_rejected(x: object, words: str) -> None:
    err = fails(click(x, 250))
    assert words in err.message
    assert "x in the click call must be an integer" in err.message


@pytest.mark.parametrize(("x", "y", "bad"), [(1001, 10, "x=1001"), (10, -1, "y=-1"), (-5, 1200, "x=-5")])
def test_coordinates_outside_0_1000_are_rejected_never_clamped(x: int, y: int, bad: str) -> None:
    raw = click(x, y)
    err = fails(raw)
    assert bad in err.message
    assert "not clamped" in err.message
    assert raw in str(err)  # the raw reply is quoted


def test_drag_end_outside_is_rejected() -> None:
    err = fails(reply({"tool_name": "drag", "start_x": 1, "start_y": 2, "end_x": 3, "end_y": 1001}))
    assert "end_y=1001" in err.message


def test_fractional_convention_is_flagged() -> None:
    err = fails(click(0.5, 0.25))
    assert "0..1 normalised convention" in err.message
    err = fails(reply({"tool_name": "drag", "start_x": 0.1, "start_y": 0.2, "end_x": 1.0, "end_y": 0.0}))
    assert "0..1 normalised convention" in err.message
    err = fails(click("0.5", "0.5"))
    assert "0..1 normalised convention" in err.message


def test_integer_zero_and_one_are_valid_coordinates_not_fractions() -> None:
    assert P.parse(click(0, 1)).action == Click(Point(0, 1))


def test_pixel_convention_is_flagged() -> None:
    err = fails(click(1532, 864))
    assert "pixel coordinates" in err.message
    assert "x=1532" in err.message


def test_tool_call_null_is_an_answer_with_the_thought() -> None:
    parsed = P.parse(reply(None, thought="The price is 12 €.", note="found price"))
    assert parsed.action == Answer("The price is 12 €.")
    assert parsed.action.ends_episode
    assert parsed.note == "found price"


def test_tool_call_null_with_blank_thought_answers_with_the_note() -> None:
    assert P.parse(reply(None, thought="  ", note="42")).action == Answer("42")


def test_tool_call_null_without_any_text_ends_the_run() -> None:
    parsed = P.parse(reply(None, thought="", note=None))
    assert parsed.action == Done("")
    assert parsed.warnings


def test_blank_answer_text_ends_the_run() -> None:
    parsed = P.parse(reply({"tool_name": "answer", "text": "   "}))
    assert parsed.action == Done("")
    assert parsed.warnings


@pytest.mark.parametrize(
    "text",
    ['"; touch /tmp/x; echo "', "$(id)", "<b>hi</b><img src=x>", "`rm -rf ~`", "line1\nline2\ttab", " lead"],
)
def test_model_text_is_kept_verbatim(text: str) -> None:
    parsed = P.parse(reply({"tool_name": "type", "text": text}, thought=text, note=text))
    assert parsed.action == Type(text)
    assert parsed.thought == text
    assert parsed.note == text


def test_missing_tool_call_field_is_rejected() -> None:
    err = fails('{"note": null, "thought": "x"}')
    assert 'no "tool_call"' in err.message


def test_tool_name_at_top_level_is_rejected() -> None:
    err = fails('{"tool_name": "click", "x": 1, "y": 2}')
    assert 'wrap it in "tool_call"' in err.message


def test_missing_thought_and_note_are_tolerated() -> None:
    parsed = P.parse('{"tool_call": {"tool_name": "wait", "seconds": 2}}')
    assert parsed.action == Wait(2.0)
    assert parsed.thought == ""
    assert parsed.note is None
    assert any("thought" in w for w in parsed.warnings)


def test_bad_thought_and_note_types_are_rejected() -> None:
    assert '"thought" must be a string' in fails('{"thought": 5, "note": null, "tool_call": null}').message
    assert '"note" must be a string or null' in fails('{"thought": "", "note": [1], "tool_call": null}').message
    assert '"tool_call" must be an object or null' in fails('{"thought": "", "tool_call": "click"}').message


def test_missing_field_is_rejected() -> None:
    err = fails(reply({"tool_name": "click", "x": 5}))
    assert "needs the field(s) y" in err.message


def test_unknown_field_is_rejected() -> None:
    err = fails(reply({"tool_name": "click", "x": 5, "y": 6, "button": "left"}))
    assert "unknown field(s) button" in err.message


def test_missing_tool_name_is_rejected() -> None:
    assert 'has no "tool_name"' in fails(reply({"x": 5, "y": 6})).message


def test_scroll_defaults_and_half_point() -> None:
    assert P.parse(reply({"tool_name": "scroll", "direction": "up"})).action == Scroll("up", 3, None)
    err = fails(reply({"tool_name": "scroll", "direction": "up", "x": 5}))
    assert "x without y" in err.message
    assert "amount" in fails(reply({"tool_name": "scroll", "direction": "up", "amount": 0})).message
    assert "direction" in fails(reply({"tool_name": "scroll", "direction": "sideways"})).message


def test_invalid_action_fields_become_policy_output_errors() -> None:
    assert "text to type is empty" in fails(reply({"tool_name": "type", "text": ""})).message
    assert "unknown key" in fails(reply({"tool_name": "key", "keys": ["hyper"]})).message
    assert "wait seconds" in fails(reply({"tool_name": "wait", "seconds": 0})).message
    assert "seconds" in fails(reply({"tool_name": "wait", "seconds": 10**400})).message
    assert "seconds" in fails(reply({"tool_name": "wait", "seconds": "2"})).message


def test_keys_as_a_chord_string_is_tolerated() -> None:
    parsed = P.parse(reply({"tool_name": "key", "keys": "ctrl+s"}))
    assert parsed.action == Key(("ctrl", "s"))
    assert parsed.warnings


def test_duplicate_keys_are_rejected() -> None:
    err = fails('{"note": null, "thought": "", "tool_call": {"tool_name": "click", "x": 1, "x": 900, "y": 2}}')
    assert "twice" in err.message


def test_nan_and_infinity_are_rejected() -> None:
    fails('{"note": null, "thought": "", "tool_call": {"tool_name": "click", "x": NaN, "y": 2}}')
    fails('{"note": null, "thought": "", "tool_call": {"tool_name": "wait", "seconds": Infinity}}')


def test_json_that_is_not_an_object_is_rejected() -> None:
    assert "a list, not one object" in fails("[" + click(1, 2) + "]").message
    assert "a string" in fails('"click at 5, 6"').message


def test_reasoning_block_is_dropped() -> None:
    raw = "<think>I could do {\"tool_name\": \"type\"} but a click is better.</think>\n" + click(9, 8)
    parsed = P.parse(raw)
    assert parsed.action == Click(Point(9, 8))
    # with reasoning on, the prompt ends with "<think>\n", so the reply may hold only the closing tag
    assert P.parse("Looking at the page... {}</think>" + click(9, 8)).action == Click(Point(9, 8))
    assert "never closed" in fails("<think>still thinking " + click(9, 8)).message


def test_overlong_reply_is_rejected() -> None:
    assert "more than" in fails(" " * 10 + "x" * 300_000).message


# ------------------------------------------------------------------------------------ round trips
@pytest.mark.parametrize("action", ALL_ACTIONS, ids=lambda a: a.kind)
def test_to_reply_parse_round_trip(action: Action) -> None:
    raw = P.to_reply(action, thought="why: <b>x</b>", note="memo ✓")
    parsed = P.parse(raw)
    assert parsed.action == action
    assert parsed.thought == "why: <b>x</b>"
    assert parsed.note == "memo ✓"
    assert parsed.warnings == ()


def test_round_trip_covers_every_action_kind() -> None:
    assert {json.loads(P.to_reply(a))["tool_call"]["tool_name"] for a in ALL_ACTIONS} == set(TOOL_NAMES)
    assert {a.kind for a in ALL_ACTIONS} == set(ACTION_TYPES) - {"plan", "key_down", "key_up"}


def test_a_plan_has_no_holo_v1_tool() -> None:
    with pytest.raises(ActionError, match="holo-v1 has no tool for action kind 'plan'"):
        P.to_reply(Plan((("Save", "running"),)))


def test_to_reply_exact_shape() -> None:
    assert json.loads(P.to_reply(Scroll("down", 5, Point(1, 2)))) == {
        "note": None,
        "thought": "",
        "tool_call": {"tool_name": "scroll", "direction": "down", "amount": 5, "x": 1, "y": 2},
    }
    assert json.loads(P.to_reply(Drag(Point(1, 2), Point(3, 4))))["tool_call"] == {
        "tool_name": "drag", "start_x": 1, "start_y": 2, "end_x": 3, "end_y": 4,
    }
    assert json.loads(P.to_reply(Done()))["tool_call"] == {"tool_name": "done"}


# ------------------------------------------------------------------------------------------ schema
def test_schema_is_valid_draft_2020_12() -> None:
    schema = P.json_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)
    assert P.json_schema() is not P.json_schema()  # callers may mutate their copy


@pytest.mark.parametrize("action", ALL_ACTIONS, ids=lambda a: a.kind)
def test_to_reply_validates_against_schema(action: Action) -> None:
    jsonschema.validate(json.loads(P.to_reply(action, thought="t")), P.json_schema())
    jsonschema.validate(json.loads(P.to_reply(action, note="n")), P.json_schema())


@pytest.mark.parametrize(
    "tool_call",
    [
        {"tool_name": "click", "x": 1001, "y": 5},
        {"tool_name": "click", "x": 0.5, "y": 5},
        {"tool_name": "click", "x": 5},
        {"tool_name": "fly"},
        {"tool_name": "scroll", "direction": "up", "x": 5},
        {"tool_name": "key", "keys": []},
        {"tool_name": "wait", "seconds": 0},
        {"tool_name": "type", "text": ""},
        {"tool_name": "click", "x": 5, "y": 5, "button": "left"},
    ],
)
def test_schema_rejects_what_parse_rejects(tool_call: dict[str, object]) -> None:
    instance = {"note": None, "thought": "", "tool_call": tool_call}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(instance, P.json_schema())
    fails(json.dumps(instance))


def test_localization_schema() -> None:
    schema = P.localization_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate({"x": 0, "y": 1000}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"x": 0, "y": 1001}, schema)


# ----------------------------------------------------------------------------------------- prompts
def test_system_prompt_states_tools_fields_and_convention() -> None:
    text = P.system_prompt()
    for name in TOOL_NAMES:
        assert f'"tool_name": "{name}"' in text
    for field in ("start_x", "end_y", "direction", "amount", "keys", "seconds", "message"):
        assert f'"{field}"' in text
    assert "integers from 0 to 1000" in text
    assert "exactly one JSON object" in text
    assert text.endswith("/no_think")
    assert P.system_prompt(reasoning=True).endswith("/think")


def test_system_prompt_example_parses() -> None:
    example = P.system_prompt().split("Example reply:\n", 1)[1].rsplit("\n", 1)[0]
    assert P.parse(example).action == Click(Point(84, 42))


def test_format_step_is_parsed_json_and_outcome() -> None:
    step = HistoryStep(
        index=2, frame=None, action=Click(Point(5, 6)), thought="go", note="n1",
        raw_text="Sure! ```" + click(5, 6) + "```", outcome="performed",
    )
    text = P.format_step(step)
    line1, line2 = text.split("\n")
    assert line1 == "Step 3: " + P.to_reply(Click(Point(5, 6)), thought="go", note="n1")
    assert line2 == "Outcome: performed"
    assert "Sure!" not in text
    bad = HistoryStep(index=0, frame=None, action=None, raw_text="garbage!!", outcome="failed: not JSON")
    assert P.format_step(bad) == (
        "Step 1: (no valid action: the reply could not be parsed)\nOutcome: failed: not JSON"
    )


# ------------------------------------------------------------------------------ history messages
def make_frame(value: int) -> Frame:
    return Frame(np.full((4, 6, 3), value, np.uint8), Monitor(1, 0, 0, 6, 4))


def history(n: int) -> tuple[HistoryStep, ...]:
    return tuple(
        HistoryStep(
            index=i, frame=make_frame(i), action=Click(Point(i, i)), thought=f"thought {i}",
            note=f"note {i}" if i % 3 == 0 else None, raw_text="", outcome="performed",
        )
        for i in range(n)
    )


def images(messages: list[dict[str, object]]) -> list[Frame]:
    out = []
    for message in messages:
        for part in message["content"]:  # type: ignore[attr-defined]
            if part["type"] == "image":
                out.append(part["frame"])
    return out


def user_text(messages: list[dict[str, object]]) -> str:
    return "\n".join(
        part["text"] for part in messages[1]["content"] if part["type"] == "text"  # type: ignore[attr-defined]
    )


def test_build_messages_bounds_images_and_keeps_text_history() -> None:
    current = make_frame(200)
    steps = history(10)
    obs = Observation(task="Book a table", frame=current, history=steps)
    messages = P.build_messages(obs, max_images=3)
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[0]["content"] == [{"type": "text", "text": P.system_prompt()}]
    imgs = images(messages)
    assert len(imgs) == 3
    assert imgs[-1] is current
    assert imgs[0] is steps[8].frame and imgs[1] is steps[9].frame
    text = user_text(messages)
    assert text.startswith("Task: Book a table")
    for step in steps:  # every step stays as text, including those without an image
        assert P.format_step(step) in text
    # the notes are carried forward, oldest first
    assert "Notes you kept:\n- (step 1) note 0\n- (step 4) note 3\n- (step 7) note 6\n- (step 10) note 9" in text
    # the image of a kept step comes right before its text
    parts = messages[1]["content"]
    idx = next(i for i, p in enumerate(parts) if p["type"] == "image")
    # (parts carry their separating line break: the template concatenates them)
    assert parts[idx + 1]["text"].startswith("\n" + P.format_step(steps[8]))


@pytest.mark.parametrize("wrap", ["```json\n{}\n```", "Sure: {}", "{}"])
def test_think_tag_quoted_inside_the_object_is_text_not_a_block_end(wrap: str) -> None:
    """Found by a newcomer run: a thought quoting "</think>" in a fenced or prose-wrapped reply was cut at
    the tag and failed with a misleading message."""
    obj = '{"thought": "a </think> b", "note": null, "tool_call": {"tool_name": "click", "x": 5, "y": 6}}'
    parsed = P.parse(wrap.format(obj) if wrap != "{}" else obj)
    assert parsed.thought == "a </think> b" and parsed.action == Click(Point(5, 6))


def test_truncated_reply_quoting_think_tag_says_never_closed() -> None:
    with pytest.raises(PolicyOutputError, match="never closed"):
        P.parse('{"note": null, "thought": "screen 666</think>no screenshot task')


def test_user_text_cannot_switch_reasoning() -> None:
    """A task or an earlier reply holding "/think" or "/no_think" must not switch the model's reasoning
    (for the local and the remote runtime alike); the system prompt's switch stays."""
    step = HistoryStep(index=0, frame=make_frame(3), action=Click(Point(1, 1)), thought="then /no_think",
                       note="see ~/think/notes.txt", raw_text="", outcome="performed")
    messages = P.build_messages(Observation(task="open ~/think/a.txt /think", frame=make_frame(4), history=(step,)))
    text = user_text(messages)
    assert "/think" not in text and "/no_think" not in text
    assert "~/\u200bthink/a.txt" in text and "notes.txt" in text
    assert messages[0]["content"][0]["text"].endswith("/no_think")  # type: ignore[index]


def test_build_messages_keeps_a_stable_prefix_through_the_current_screenshot() -> None:
    """Step k+1's prompt starts with step k's up to the end of step k's screenshot (while no older
    screenshot drops out), so a local runtime can keep its decoder state for that part."""
    steps = history(4)

    def flat(messages: list[dict[str, object]]) -> list[object]:
        out: list[object] = []
        for part in messages[1]["content"]:  # type: ignore[attr-defined]
            out.append(part["text"] if part["type"] == "text" else part["frame"])
        return out

    for k in range(3):
        now = flat(P.build_messages(Observation(task="t", frame=steps[k].frame, history=steps[:k]), max_images=5))
        nxt = flat(P.build_messages(Observation(task="t", frame=make_frame(77), history=steps[: k + 1]),
                                    max_images=5))
        end = max(i for i, p in enumerate(now) if not isinstance(p, str))  # the current screenshot
        for a, b in zip(now[: end + 1], nxt[: end + 1], strict=True):
            assert a is b if not isinstance(a, str) else a == b  # frames compare by identity
        assert isinstance(nxt[end + 1], str) and nxt[end + 1].startswith("\n" + P.format_step(steps[k]))


@pytest.mark.parametrize(("max_images", "expected"), [(1, 1), (2, 2), (5, 5), (50, 11)])
def test_build_messages_image_count(max_images: int, expected: int) -> None:
    obs = Observation(task="t", frame=make_frame(255), history=history(10))
    imgs = images(P.build_messages(obs, max_images=max_images))
    assert len(imgs) == expected
    assert imgs[-1] is obs.frame


def test_build_messages_skips_steps_without_frames() -> None:
    steps = list(history(4))
    steps[3] = HistoryStep(index=3, frame=None, action=None, outcome="failed: bad reply")
    obs = Observation(task="t", frame=make_frame(99), history=tuple(steps))
    imgs = images(P.build_messages(obs, max_images=3))
    assert imgs == [steps[1].frame, steps[2].frame, obs.frame]


def test_build_messages_first_step_and_reasoning() -> None:
    obs = Observation(task="Open <b>settings</b>", frame=make_frame(1))
    messages = P.build_messages(obs, reasoning=True)
    assert images(messages) == [obs.frame]
    assert "Task: Open <b>settings</b>" in user_text(messages)
    assert "Screenshot before step 1:" in user_text(messages)
    assert user_text(messages).endswith("Reply with the JSON object for step 1.")
    assert messages[0]["content"][0]["text"].endswith("/think")  # type: ignore[index]


@pytest.mark.parametrize("bad", [0, -1, True])
def test_build_messages_rejects_no_current_image(bad: int) -> None:
    with pytest.raises(SettingsError):
        P.build_messages(Observation(task="t", frame=make_frame(1)), max_images=bad)


# ------------------------------------------------------------------------------------ localization
def test_localization_prompt_contains_target_verbatim() -> None:
    target = 'the "Send" button {not the draft}'
    text = P.localization_prompt(target)
    assert f"Element: {target}\n" in text
    assert '{"x": int, "y": int}' in text
    assert text.endswith("/no_think")


def test_parse_localization() -> None:
    assert P.parse_localization('{"x": 120, "y": 980}') == Point(120, 980)
    assert P.parse_localization('```json\n{"x": "120", "y": 980.0}\n```') == Point(120, 980)
    for raw, words in [
        ('{"x": 1200, "y": 5}', "pixel"),
        ('{"x": 0.3, "y": 0.7}', "0..1 normalised"),
        ('{"x": 5}', "lacks y"),
        ('{"x": 5, "y": 6, "label": "OK"}', "unexpected field(s) label"),
        ("", "empty"),
        ('{"x": 5, "y": 6} {"x": 7, "y": 8}', "different JSON objects"),
    ]:
        with pytest.raises(PolicyOutputError) as info:
            P.parse_localization(raw)
        assert words in info.value.message
        assert info.value.raw_text == raw


def test_holo_v1_tools_are_declared_once_and_the_schema_and_prompt_derive_from_them() -> None:
    from holodesk.policy.protocol import _TOOLS

    variants = P.json_schema()["properties"]["tool_call"]["anyOf"][:-1]
    names = [v["properties"]["tool_name"]["const"] for v in variants]
    assert list(dict.fromkeys(names)) == [t.name for t in _TOOLS] == list(TOOL_NAMES)
    assert names.count("scroll") == 2  # x and y together or neither: two variants
    prompt = P.system_prompt()
    for tool in _TOOLS:
        fields = {k for v in variants if v["properties"]["tool_name"]["const"] == tool.name for k in v["properties"]}
        assert fields - {"tool_name"} == set(tool.fields)
        assert f'- {{"tool_name": "{tool.name}"' in prompt and tool.help in prompt
