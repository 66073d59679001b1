"""The autopilot's accessibility lookup on GNOME Wayland (issue 31): the real headless mutter session, the real
Mutter capture and executor, the real accessibility bus (started by D-Bus activation on the session's bus) and
the real Session and risk rules; the model is a list of proposals (no model runs here) and the user at the prompt
a spy that skips whatever it is asked. What happened is read from the programs' own state files.

On Wayland no program knows where windows are on the screen, so the lookup finds the focused element only, and
only in the window that states it is active (``control/accessibility.py``): typing into the focused field of the
active GTK 3 or GTK 4 window is approved, and a space on its focused button asks.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from holodesk.control.accessibility import NO_SCREEN_POSITIONS, AccessibilityProbe
from holodesk.core.actions import Action, Click, Key, Type
from holodesk.core.geometry import frame_pixel_to_point, place
from holodesk.core.risk import Risk
from holodesk.session.approval import ApprovalPolicy, ApprovalResponse, Decision
from holodesk.session.loop import Session
from holodesk.session.state import SessionLimits, State
from tests.field_cases.fakes import SpyApprover
from tests.field_cases.test_autopilot_escapes import ListPolicy
from tests.helpers.desktop import APPS, wait_until
from tests.helpers.mutter import SYSTEM_PYTHON, MutterSession, TargetApp
from tests.helpers.processes import stop_process
from tests.wayland.conftest import GnomeDesktop

pytestmark = [pytest.mark.wayland]

ACCESSIBLE = {"GDK_BACKEND": "wayland", "NO_AT_BRIDGE": "0", "GTK_A11Y": "atspi"}
"""A GTK program on the session, publishing its accessibility tree."""


@pytest.fixture
def gtk3_escapes(mutter: MutterSession, tmp_path: Path) -> Iterator[Path]:
    """tests/apps/gtk_escapes.py fullscreen on the session (native Wayland); its layout file."""
    layout = tmp_path / "escapes.json"
    with open(tmp_path / "escapes.log", "wb") as log:
        proc = subprocess.Popen([SYSTEM_PYTHON, str(APPS / "gtk_escapes.py"), "--layout", str(layout), "--fullscreen"],
                                env={**mutter.env, **ACCESSIBLE}, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield layout
    finally:
        stop_process(proc)


def _state(layout: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(layout.read_text(encoding="utf-8")))
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def _session(gnome: GnomeDesktop, actions: list[Action], spy: SpyApprover, probe: AccessibilityProbe,
             episodes: Path) -> Session:
    """The session as ``build_session`` makes it on the mutter backend: no focus, window or grab probe (Wayland
    has none), the lookup without screen coordinates."""
    return Session(ListPolicy(actions), gnome.capture, gnome.executor, ApprovalPolicy("auto", spy),
                   SessionLimits(max_steps=len(actions) + 2), episodes_dir=episodes, element_probe=probe,
                   stop_event=gnome.executor.stop_event)


def _click_until(gnome: GnomeDesktop, x: float, y: float, done: Callable[[], bool], what: str) -> None:
    """Click at screen point (x, y) with the Mutter executor (the test's own setup step, not the model's) until
    ``done()`` (a window laid out may not be on the screen yet: a click before it shows reaches nothing)."""

    def clicked() -> bool:
        frame = gnome.capture.grab(1)
        assert gnome.executor.execute(place(Click(frame_pixel_to_point(frame, x, y)), frame)).ok
        try:
            return bool(wait_until(done, 2, what))
        except TimeoutError:
            return False

    wait_until(clicked, 30, what)


def test_typing_into_an_active_gtk3_field_is_approved_and_a_space_on_its_focused_button_asks(
        mutter: MutterSession, gnome: GnomeDesktop, gtk3_escapes: Path, tmp_path: Path) -> None:
    layout = gtk3_escapes
    rects = wait_until(lambda: _state(layout).get("rects", {}).get("notes", [0, 0, 0, 0])[2] > 200 and
                       _state(layout)["rects"], 30, "the fullscreen GTK 3 window")
    x, y, w, h = rects["notes"]
    _click_until(gnome, x + w / 2, y + h / 2, lambda: _state(layout).get("focus") == "notes",
                 "the notes field to have the keyboard focus")  # mutter may give a new window none until clicked
    probe = AccessibilityProbe(mutter.bus_address, screen_coordinates=False)
    focused = wait_until(probe.focused, 20, "the GTK 3 window's tree")
    assert (focused.role, focused.active_window) == ("text", True)
    assert probe.element_at(int(x + w / 2), int(y + h / 2)) is None and probe.last_problem == NO_SCREEN_POSITIONS
    actions: list[Action] = [
        Key(("end",)),  # control: approved
        Type(" too"),  # control: approved, lands in the field
        Key(("tab",)),  # approved: the focus moves to "Delete all files"
        Type(" "),  # escape: a space presses the focused button
    ]
    spy = SpyApprover(default=ApprovalResponse(Decision.SKIP))
    result = _session(gnome, actions, spy, probe, tmp_path / "episodes").run("tidy up")
    assert result.status is State.FINISHED, result
    assert [(r.action.kind, r.risk.level) for r in spy.requests] == [("type", Risk.HIGH)], \
        [(r.action, r.risk.reason) for r in spy.requests]
    assert "push button \u2018Delete all files\u2019" in spy.requests[0].risk.reason
    state = wait_until(lambda: (s := _state(layout)).get("notes") == "keep me too" and s.get("focus") == "delete"
                       and s, 20, "the approved text in the GTK 3 field, the focus on the button")
    assert state["deletes"] == 0


def test_typing_into_the_active_gtk4_field_is_approved_and_a_space_on_its_focused_button_asks(
        mutter: MutterSession, gnome: GnomeDesktop, tmp_path: Path) -> None:
    app: TargetApp = mutter.start_app(env={"GTK_A11Y": "atspi"})
    try:
        _click_until(gnome, *app.center("entry"), lambda: app.state()["entry_focused"] is True,
                     "the entry to have the keyboard focus")
        probe = AccessibilityProbe(mutter.bus_address, screen_coordinates=False)
        focused = wait_until(probe.focused, 20, "the active GTK 4 window's focused entry")
        assert (focused.role, focused.active_window) == ("text box", True)
        actions: list[Action] = [
            Type("hello"),  # control: approved, lands in the entry
            Key(("shift", "tab")),  # approved: the focus moves to the button "Press me"
            Type(" "),  # escape: a space presses the focused button
        ]
        spy = SpyApprover(default=ApprovalResponse(Decision.SKIP))
        result = _session(gnome, actions, spy, probe, tmp_path / "episodes").run("type")
        assert result.status is State.FINISHED, result
        assert [(r.action.kind, r.risk.level) for r in spy.requests] == [("type", Risk.HIGH)], \
            [(r.action, r.risk.reason) for r in spy.requests]
        assert "button \u2018Press me\u2019" in spy.requests[0].risk.reason
        state = app.wait_state(lambda s: s["text"] == "hello" and s["entry_focused"] is False)
        assert state["clicks"] == 0
    finally:
        app.stop()
