"""The action vocabulary: every kind validates its fields with one precise error."""

from __future__ import annotations

import pytest

from holodesk.core.actions import (
    ACTION_TYPES,
    Answer,
    Click,
    Done,
    Drag,
    Key,
    Plan,
    Point,
    Scroll,
    Type,
    Wait,
    action_from_dict,
)
from holodesk.core.risk import Risk, assess
from holodesk.core.wording import describe
from holodesk.errors import ActionError


def test_closed_set_of_kinds() -> None:
    assert set(ACTION_TYPES) == {"click", "move", "drag", "scroll", "type", "key", "key_down", "key_up", "wait",
                                 "plan", "answer", "done"}


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: Click("500,500"), "point"),  # type: ignore[arg-type]
        (lambda: Drag(Point(1, 1), None), "end"),  # type: ignore[arg-type]
        (lambda: Scroll("sideways"), "direction"),
        (lambda: Scroll("up", 0), "amount"),
        (lambda: Scroll("up", 2.5), "amount"),  # type: ignore[arg-type]
        (lambda: Type(""), "text"),
        (lambda: Type("x" * 10_001), "text"),
        (lambda: Key(()), "keys"),
        (lambda: Key(("ctrl", "frobnicate")), "keys"),
        (lambda: Wait(0), "seconds"),
        (lambda: Wait(float("nan")), "seconds"),
        (lambda: Answer("  "), "text"),
        (lambda: Plan(()), "goals"),
        (lambda: Plan((("  ", "todo"),)), "goals"),
        (lambda: Plan((("x" * 101, "todo"),)), "goals"),
        (lambda: Plan((("Save", "later"),)), "goals"),
        (lambda: Plan((("Save",),)), "goals"),  # type: ignore[arg-type]
        (lambda: Plan(tuple(("g", "todo") for _ in range(21))), "goals"),
        (lambda: Key(("ctrl", "z"), repeat=0), "repeat"),
        (lambda: Key(("ctrl", "z"), repeat=21), "repeat"),
        (lambda: Type("x", replace="yes"), "replace"),  # type: ignore[arg-type]
    ],
)
def test_bad_field_is_named(make: object, field: str) -> None:
    with pytest.raises(ActionError) as info:
        make()  # type: ignore[operator]
    assert info.value.field == field


def test_key_names_are_normalised() -> None:
    assert Key(("Control", "Shift", "T")).keys == ("ctrl", "shift", "t")
    assert Key(("Escape",)).keys == ("esc",)
    assert Key("ctrl+s").keys == ("ctrl", "s")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "action",
    [Click(Point(1, 2)), Drag(Point(0, 0), Point(1000, 1000)), Scroll("left", 5, Point(3, 4)),
     Type("Grüße\n日本語"), Key(("alt", "f4")), Wait(2.5), Answer("42"), Done("ok"),
     Plan((("Open the file", "done"), ("Fix the typo", "running"), ("Save", "todo")))],
)
def test_dict_round_trip(action: object) -> None:
    assert action_from_dict(action.to_dict()) == action  # type: ignore[attr-defined]


def test_describe_is_the_context_free_headline() -> None:
    text = '"; touch /tmp/x; echo "'
    assert describe(Type(text)) == f"Type ‘{text}’"
    assert describe(Drag(Point(1, 2), Point(3, 4))) == "Drag from (1, 2) of 1000 to (3, 4) of 1000"


def test_element_is_validated_and_kept_through_records() -> None:
    click = Click(Point(5, 6), element="OK button")
    assert action_from_dict(click.to_dict()) == click
    assert Click(Point(5, 6), element="  ").element is None
    with pytest.raises(ActionError) as err:
        Click(Point(5, 6), element=3)  # type: ignore[arg-type]
    assert err.value.field == "element"
    with pytest.raises(ActionError):
        Scroll("down", 2, element="x" * 501)
    assert Drag(Point(1, 2), Point(3, 4), element="file").element == "file"


def test_a_plan_is_low_risk_anywhere_and_does_not_end_the_task() -> None:
    plan = Plan([{"title": "Save the file", "status": "running"}])  # type: ignore[arg-type]
    assert plan.goals == (("Save the file", "running"),) and not plan.ends_episode
    for window in (None, "", "xterm XTerm", "mousepad Mousepad"):
        risk = assess(plan, focused_window=window, pointer_windows=[None])
        assert (risk.level, risk.reason) == (Risk.LOW, "does not touch the screen")


def test_risk_classes() -> None:
    editor = "mousepad Mousepad"
    assert assess(Type("hello"), focused_window=editor).level is Risk.LOW
    assert assess(Type("hello")).level is Risk.HIGH  # the focused window is unknown
    assert assess(Type("hello"), focused_window="xterm XTerm").level is Risk.HIGH
    assert assess(Type("rm -rf ~\n"), focused_window=editor).level is Risk.HIGH
    assert assess(Key(("alt", "f4")), focused_window=editor).level is Risk.HIGH
    assert assess(Key(("shift", "ctrl", "w")), focused_window=editor).level is Risk.HIGH
    assert assess(Key(("enter",)), focused_window=editor).level is Risk.HIGH
    assert assess(Key(("down",)), focused_window=editor).level is Risk.LOW
    assert assess(Click(Point(5, 5)), focused_window=editor).level is Risk.LOW
    assert assess(Type("x"), focused_window="determine Determine").level is Risk.LOW


def test_new_optional_fields_are_recorded_only_when_used() -> None:
    """Records written before ``repeat`` and ``replace`` existed read back the same; when used they are kept."""
    from holodesk.core.actions import action_from_dict

    assert Key(("ctrl", "s")).to_dict() == {"kind": "key", "keys": ["ctrl", "s"]}
    assert Type("a").to_dict() == {"kind": "type", "text": "a"}
    for action in (Key(("ctrl", "z"), repeat=3), Type("new", replace=True)):
        assert action_from_dict(action.to_dict()) == action
    assert Key(("ctrl", "z"), repeat=3).to_dict()["repeat"] == 3
