"""Field cases F14-F15: typing, for real on Xvfb (the real Session and pyautogui executor typing into a
real QLineEdit and a real QPlainTextEdit, read back from the windows' own state), plus the paste-chord
rules for platforms we do not have (macOS, Windows) through :func:`default_paste_chord`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from holodesk.capture.mss_backend import MssCapture
from holodesk.control.pyautogui_executor import PyAutoGUIExecutor
from holodesk.control.typing import default_paste_chord
from holodesk.control.window import focused_window_class
from holodesk.core.geometry import frame_pixel_to_point, place
from holodesk.session.loop import State
from tests.conftest import XvfbServer
from tests.field_cases.fakes import FakeFocusProbe, make_run, reply
from tests.helpers.target import TargetWindow

F14_TEXT = "Grüße, żółw, Ελληνικά, 日本語"
F14_MULTILINE = "Grüße, żółw,\tΕλληνικά\n日本語\tend"
PREVIOUS_CLIPBOARD = "the user's own clipboard ✓ (kept)"


@pytest.mark.parametrize("method", ["xtest", "clipboard"])
def test_F14_non_ascii_text_with_tab_and_newline_is_typed_exactly(method: str, xvfb: XvfbServer,
                                                                   tmp_path: Path) -> None:
    import pyperclip

    pyperclip.copy(PREVIOUS_CLIPBOARD)
    executor = PyAutoGUIExecutor(typing=method)  # type: ignore[arg-type]
    with TargetWindow.start(tmp_path / "line", x=200, y=150) as line_win, \
            TargetWindow.start(tmp_path / "multi", x=800, y=150, notes=True) as text_win, MssCapture() as cap:
        frame = cap.grab(1)
        field = frame_pixel_to_point(frame, *line_win.center("field"))
        notes = frame_pixel_to_point(frame, *text_win.center("notes"))
        run = make_run([
            reply({"tool_name": "click", "x": field.x, "y": field.y}),
            reply({"tool_name": "type", "text": F14_TEXT}),
            reply({"tool_name": "click", "x": notes.x, "y": notes.y}),
            reply({"tool_name": "type", "text": F14_MULTILINE}),
            reply(None, "typed both"),
        ], cap, executor, focus_probe=focused_window_class)
        result = run.session.run("type the greetings")
        assert result.status is State.FINISHED, result
        line_state = line_win.wait_for(lambda s: s["text"] == F14_TEXT, timeout=10)
        text_state = text_win.wait_for(lambda s: s["notes"] == F14_MULTILINE, timeout=10)
    assert line_state["text"] == F14_TEXT and line_state["submits"] == 0
    assert text_state["notes"] == F14_MULTILINE
    results = [e.data["result"] for e in run.kinds("result")]
    assert all(r.ok for r in results), results
    assert pyperclip.paste() == PREVIOUS_CLIPBOARD  # the user's clipboard is back
    if method == "clipboard":
        assert [r.details["clipboard_restored"] for r in results if r.details.get("typing_method")] == [True, True]


@pytest.mark.parametrize(
    ("platform", "wm_class", "chord"),
    [
        ("darwin", None, ("cmd", "v")),
        ("darwin", "Terminal com.apple.Terminal", ("cmd", "v")),  # macOS terminals paste with Cmd+V too
        ("win32", None, ("ctrl", "v")),
        ("linux", "target_window.py Target_window.py", ("ctrl", "v")),
        ("linux", "firefox Firefox", ("ctrl", "v")),
        ("linux", "xterm XTerm", ("ctrl", "shift", "v")),
        ("linux", "gnome-terminal-server Gnome-terminal", ("ctrl", "shift", "v")),
        ("linux", "kitty kitty", ("ctrl", "shift", "v")),
    ],
)
def test_F15_paste_chord_depends_on_platform_and_target(platform: str, wm_class: str | None,
                                                        chord: tuple[str, ...]) -> None:
    assert default_paste_chord(platform, wm_class) == chord


def test_F15_paste_chord_follows_the_real_focused_window(xvfb: XvfbServer, tmp_path: Path) -> None:
    executor = PyAutoGUIExecutor(typing="clipboard")
    with TargetWindow.start(tmp_path, x=200, y=150) as win, MssCapture() as cap:
        field = frame_pixel_to_point(cap.grab(1), *win.center("field"))
        run = make_run([reply({"tool_name": "click", "x": field.x, "y": field.y}),
                        reply({"tool_name": "type", "text": "pasted"}), reply(None, "ok")], cap, executor)
        run.session.run("paste")
        win.wait_for(lambda s: s["text"] == "pasted", timeout=10)
    pasted = run.kinds("result")[1].data["result"]
    assert pasted.details["paste_chord"] == "ctrl+v"
    assert "target_window" in (pasted.details["target_class"] or "").lower()


def test_F15_unverifiable_paste_is_reported_not_assumed(xvfb: XvfbServer, tmp_path: Path) -> None:
    """The focused window is taken for a terminal (fake focus: a WM_CLASS of xterm), so the paste chord
    is Ctrl+Shift+V, which the real QLineEdit ignores: nothing arrives. Holodesk cannot see that; it
    must say so to the user and to the model instead of reporting success."""
    import pyperclip

    pyperclip.copy(PREVIOUS_CLIPBOARD)
    executor = PyAutoGUIExecutor(typing="clipboard", target_class=FakeFocusProbe("xterm XTerm"))
    with TargetWindow.start(tmp_path, x=200, y=150) as win, MssCapture() as cap:
        field = frame_pixel_to_point(cap.grab(1), *win.center("field"))
        run = make_run([reply({"tool_name": "click", "x": field.x, "y": field.y}),
                        reply({"tool_name": "type", "text": "lost text"}), reply(None, "ok")], cap, executor)
        result = run.session.run("paste")
        assert win.state()["text"] == ""  # the paste did not arrive
    assert result.status is State.FINISHED
    pasted = run.kinds("result")[1].data["result"]
    assert (pasted.ok, pasted.verified) == (True, False)
    assert pasted.details["paste_chord"] == "ctrl+shift+v"
    assert "could not be verified" in pasted.message
    (warning,) = [w for w in run.kinds("warning") if w.step == 1]
    assert warning.message.startswith("Could not verify that the action worked")
    # The model is told the truth on the next step.
    last_history = run.policy.observations[2].history[-1]
    assert last_history.outcome.startswith("sent but not verified")
    assert pyperclip.paste() == PREVIOUS_CLIPBOARD


def test_F15_paste_waits_for_a_slow_target_before_restoring_the_clipboard(xvfb: XvfbServer, tmp_path: Path
                                                                          ) -> None:
    """X11 pastes are fetched when the target gets round to it. The target window is frozen (SIGSTOP)
    while the paste chord is pressed and thawed a second later, far past any fixed restore delay: the
    paste still brings the model's text (not the user's previous clipboard), and the user's clipboard is
    restored afterwards. This is the loaded-machine race behind the F10 clipboard flake, made certain."""
    import os
    import signal
    import threading

    import pyperclip

    from holodesk.core.actions import Click, Point, Type

    pyperclip.copy(PREVIOUS_CLIPBOARD)
    text = "pasted while the target was frozen ✓"
    executor = PyAutoGUIExecutor(typing="clipboard")
    with TargetWindow.start(tmp_path, x=200, y=150) as win, MssCapture() as cap:
        frame = cap.grab(1)
        field = frame_pixel_to_point(frame, *win.center("field"))
        assert executor.execute(place(Click(Point(field.x, field.y)), frame)).ok
        win.wait_for(lambda s: s["focus"] == "field", timeout=10)
        os.kill(win.process.pid, signal.SIGSTOP)
        thaw = threading.Timer(1.0, os.kill, (win.process.pid, signal.SIGCONT))
        thaw.start()
        try:
            result = executor.execute(place(Type(text), frame))
        finally:
            thaw.join()
            os.kill(win.process.pid, signal.SIGCONT)
        state = win.wait_for(lambda s: s["text"] != "", timeout=10)
    assert state["text"] == text
    assert result.ok and result.details["target_fetched"] is True, result
    assert result.details["clipboard_restored"] is True
    assert pyperclip.paste() == PREVIOUS_CLIPBOARD
