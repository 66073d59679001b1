"""The held-key actions (KeyDown, KeyUp, Key.taps): validation, risk rules and words."""

from __future__ import annotations

import pytest

from holodesk.core.actions import Click, Key, KeyDown, KeyUp, Point, Type, Wait, action_from_dict
from holodesk.core.risk import Risk, assess, selection_after
from holodesk.core.wording import step_words
from holodesk.errors import ActionError


def test_key_down_and_up_validate_and_round_trip() -> None:
    down = KeyDown(["Shift", "control", "shift"])  # type: ignore[arg-type]
    assert down.keys == ("shift", "ctrl")  # canonical, a key named again kept once
    assert down.to_dict() == {"kind": "key_down", "keys": ["shift", "ctrl"]}
    assert action_from_dict(down.to_dict()) == down
    assert action_from_dict({"kind": "key_up", "keys": ["shift"]}) == KeyUp(("shift",))
    with pytest.raises(ActionError, match="at most 3"):
        KeyDown(("shift", "ctrl", "alt", "super"))
    with pytest.raises(ActionError, match="non-empty"):
        KeyUp(())
    with pytest.raises(ActionError, match="unknown key"):
        KeyDown(("hyper",))


def test_taps_are_tapped_while_up_to_three_keys_are_held() -> None:
    taps = Key(("alt",), taps=("tab", "Tab", "tab", "tab", "tab"))
    assert taps.taps == ("tab",) * 5 and action_from_dict(taps.to_dict()) == taps
    assert "taps" not in Key(("ctrl", "s")).to_dict()  # records without taps read as before
    with pytest.raises(ActionError, match="taps"):
        Key(("alt",), taps=("tab",) * 6)
    with pytest.raises(ActionError, match="at most 3"):
        Key(("ctrl", "alt", "shift", "super"), taps=("t",))
    assert Key(("ctrl", "alt", "shift", "super", "t")).keys[-1] == "t"  # a chord still takes 5


def test_holding_a_key_asks_and_everything_while_it_is_held_asks() -> None:
    down = assess(KeyDown(("shift",)), focused_window="mousepad")
    assert down.level is Risk.HIGH and "Shift" in down.reason and "until it is released" in down.reason
    assert assess(KeyUp(("shift",)), focused_window="mousepad").level is Risk.LOW
    click = Click(Point(500, 500), element="file")
    assert assess(click, focused_window="mousepad", pointer_windows=["mousepad"]).level is Risk.LOW
    held = assess(click, focused_window="mousepad", pointer_windows=["mousepad"], held_keys=("ctrl",))
    assert held.level is Risk.HIGH and "Ctrl is held down" in held.reason
    assert assess(Key(("tab",)), focused_window="mousepad", held_keys=("shift",)).level is Risk.HIGH
    assert assess(Wait(1.0), held_keys=("shift",)).level is Risk.LOW


def test_taps_are_judged_chord_by_chord() -> None:
    assert assess(Key(("shift",), taps=("tab", "tab")), focused_window="mousepad").level is Risk.LOW
    risky = assess(Key(("ctrl",), taps=("tab", "w")), focused_window="mousepad")
    assert risky.level is Risk.HIGH and "Ctrl+W" in risky.reason
    assert selection_after(Key(("shift",), taps=("right", "right")), False)
    assert not selection_after(Type("x"), True)


def test_words_of_held_keys() -> None:
    assert step_words(KeyDown(("shift",))).headline == "Hold Shift down"
    assert step_words(KeyUp(("shift", "ctrl"))).headline == "Release Shift+Ctrl"
    assert step_words(Key(("alt",), taps=("tab", "tab"))).headline == "Hold Alt and tap Tab, Tab"
    details = step_words(Click(Point(1, 2)), held_keys=("shift",)).details
    assert details[-1] == "Held down: Shift (released by a key up, or when the task ends)"
    assert not any(d.startswith("Held down") for d in step_words(Click(Point(1, 2))).details)
