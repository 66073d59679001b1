"""An action class the vocabulary does not declare (tests/helpers/new_action.py: a new one, as a contributor would
add it, and a subclass of Click): the card says it is unknown, the risk rules ask, the record refuses to read it
back as something else; and the triple click, which needs no new class. The executors' refusals are tested on
real desktops: tests/session/test_new_action_x11.py (X11) and tests/wayland/test_mutter_backends.py (GNOME
Wayland)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest

from holodesk.core.actions import ACTION_TYPES, Action, Click, Point, action_from_dict
from holodesk.core.risk import Risk, assess
from holodesk.core.wording import step_words
from holodesk.errors import ActionError
from tests.helpers.new_action import LongPress, TripleTap

NEW = [TripleTap(Point(500, 500), element="Keep"), LongPress(Point(500, 500), element="Keep")]
KNOWN_WINDOWS = {"focused_window": "mousepad Mousepad", "pointer_windows": ["mousepad Mousepad"]}


@pytest.mark.parametrize("action", NEW, ids=["new", "subclass"])
def test_the_card_says_the_action_is_unknown(action: Action) -> None:
    words = step_words(action)
    assert words.headline == f"Unknown action \u2018{action.kind}\u2019 at (500, 500) of 1000"
    assert not words.headline.startswith("Click")


@pytest.mark.parametrize("action", NEW, ids=["new", "subclass"])
def test_an_unknown_action_asks_where_a_click_does_not(action: Action) -> None:
    assert assess(Click(Point(500, 500), element="Keep"), **KNOWN_WINDOWS).level is Risk.LOW  # the same place
    risk = assess(action, **KNOWN_WINDOWS)
    assert risk.level is Risk.HIGH
    assert f"do not know the action type \u2018{action.kind}\u2019 ({type(action).__name__})" in risk.reason


@pytest.mark.parametrize("action", NEW, ids=["new", "subclass"])
def test_the_record_of_an_unknown_action_is_not_read_back_as_another(action: Action) -> None:
    record = action.to_dict()
    assert record["kind"] == action.kind and record["point"] == {"x": 500, "y": 500}
    with pytest.raises(ActionError, match=f"unknown action kind '{action.kind}'") as err:
        action_from_dict(record)
    assert "click" in err.value.hint


def test_a_triple_click_needs_no_new_class() -> None:
    triple = Click(Point(10, 20), element="line", count=3)
    assert ACTION_TYPES["click"] is Click and triple.verb == "triple-click"
    assert action_from_dict(triple.to_dict()) == triple
    assert step_words(triple).headline == "Triple-click \u2018line\u2019"
    assert assess(triple, **KNOWN_WINDOWS).level is Risk.LOW
    assert assess(Click(Point(10, 20), element="Delete all files", count=3), **KNOWN_WINDOWS).level is Risk.HIGH


@pytest.mark.parametrize(("fields", "field"), [({"count": 4}, "count"), ({"count": 0}, "count"),
                                               ({"count": True}, "count"), ({"button": "back"}, "button")])
def test_a_click_refuses_a_bad_button_or_count(fields: dict[str, object], field: str) -> None:
    with pytest.raises(ActionError) as err:
        Click(Point(1, 1), **fields)  # type: ignore[arg-type]
    assert err.value.field == field


def test_older_records_of_the_click_kinds_read_back_as_one_click() -> None:
    at = {"x": 3, "y": 4}
    assert action_from_dict({"kind": "double_click", "point": at}) == Click(Point(3, 4), count=2)
    assert action_from_dict({"kind": "right_click", "point": at, "element": "file"}) == Click(
        Point(3, 4), element="file", button="right")
    assert action_from_dict({"kind": "middle_click", "point": at}) == Click(Point(3, 4), button="middle")
    assert Click(Point(3, 4)).to_dict() == {"kind": "click", "point": at, "element": None}


@dataclass(frozen=True)
class Hover(Action):
    """Test only: a new one-point action as docs/actions.md "Adding an action" declares one (core/actions.py)."""

    kind: ClassVar[str] = "hover"
    point: Point
    element: str | None = None

    def points(self) -> tuple[Point, ...]:
        return (self.point,)

    @property
    def verb(self) -> str:
        return "hover over"


def test_a_declared_new_action_needs_no_wording_and_asks_until_the_risk_rules_know_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(ACTION_TYPES, Hover.kind, Hover)  # step 1 of the walk: its entry in ACTION_TYPES
    hover = Hover(Point(500, 500), element="Help icon")
    assert step_words(hover).headline == "Hover over \u2018Help icon\u2019"
    assert assess(hover, **KNOWN_WINDOWS).level is Risk.HIGH
    assert action_from_dict(hover.to_dict()) == hover
