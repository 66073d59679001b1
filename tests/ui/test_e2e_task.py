"""A whole task through the UI against a real target window, under a window manager (openbox, and xfwm4
with its compositor).

Global hotkey sent with xdotool -> command palette -> task typed with xdotool -> ScriptedPolicy proposes a
click on the target's OK button -> the overlay marks the button -> Enter (xdotool) -> the real executor
(pyautogui) clicks -> the target window records the click. Real screen capture (mss) throughout.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from holodesk.core.actions import Click, Done
from holodesk.core.geometry import Frame, Monitor, frame_pixel_to_point
from holodesk.policy.scripted import ScriptedPolicy, write_script
from holodesk.session.state import State
from holodesk.settings import Settings
from holodesk.ui.app import HolodeskApp
from tests.helpers.desktop import WINDOW_MANAGERS, WindowManager, start_window_manager
from tests.helpers.target import TargetWindow
from tests.ui.conftest import wait_finished, wait_overlay

pytestmark = [pytest.mark.gui, pytest.mark.e2e]


@pytest.fixture(autouse=True, params=WINDOW_MANAGERS)
def window_manager(request: pytest.FixtureRequest, ui_env: Any, tmp_path: Path) -> Iterator[WindowManager]:
    """Every test here runs under a real window manager (tests/helpers/desktop.py), stopped afterwards."""
    (tmp_path / "wm").mkdir()
    wm = start_window_manager(ui_env.env(), str(request.param), tmp_path / "wm")
    try:
        yield wm
    finally:
        wm.stop()


def xdotool(env_display: Any, *args: str) -> None:
    env_display.run("xdotool", *args)


def test_hotkey_palette_overlay_enter_clicks_the_button(qtbot: Any, ui_env: Any, tmp_path: Path) -> None:
    server = ui_env
    with TargetWindow.start(tmp_path / "target", x=700, y=500) as target:
        cx, cy = target.center("OK")
        screen = Frame(np.zeros((server.height, server.width, 3), dtype=np.uint8),
                       Monitor(1, 0, 0, server.width, server.height))
        script = write_script(tmp_path / "steps.jsonl",
                              [Click(frame_pixel_to_point(screen, cx, cy)), Done("clicked OK")])
        settings = Settings(data_dir=tmp_path / "data", approval="step")
        app = HolodeskApp(settings, hotkeys=True, dialogs=False,
                          policy_factory=lambda s, progress: ScriptedPolicy(script),
                          settings_path=tmp_path / "settings.toml")
        app.start()
        try:
            assert app.hotkeys.active
            qtbot.wait(300)
            xdotool(server, "key", "--clearmodifiers", "ctrl+alt+h")
            qtbot.waitUntil(app.palette.isVisible, timeout=5000)
            qtbot.waitUntil(app.palette.input.hasFocus, timeout=10000)
            qtbot.wait(200)
            xdotool(server, "type", "--delay", "20", "click OK")
            qtbot.waitUntil(lambda: app.palette.input.text() == "click OK", timeout=5000)
            xdotool(server, "key", "Return")
            overlay = wait_overlay(qtbot, app, timeout_ms=20000)
            point = app.approval.pending.request.input_points[0]
            x, y, w, h = target.rects["OK"]
            assert x <= point.x < x + w and y <= point.y < y + h  # the mark is on the button
            assert target.state()["clicks"] == []  # nothing before the approval
            qtbot.waitUntil(overlay.isActiveWindow, timeout=10000)
            xdotool(server, "key", "Return")
            # Keep the GUI thread processing events while waiting: the worker hides the overlay through it.
            result = wait_finished(qtbot, app, timeout_ms=20000)
            assert result.status is State.FINISHED, result.reason
            qtbot.waitUntil(lambda: target.state().get("clicks") == ["OK"], timeout=5000)
        finally:
            app.shutdown(wait_s=10.0)


def test_stop_hotkey_stops_a_pending_approval(qtbot: Any, ui_env: Any, make_app: Any) -> None:
    from holodesk.core.actions import Point

    kit = make_app([Click(Point(500, 500))], hotkeys=True)
    assert kit.app.hotkeys.active
    kit.app.start_task("wait for me")
    wait_overlay(qtbot, kit.app)
    subprocess.run(["xdotool", "key", "--clearmodifiers", "ctrl+alt+x"], check=True, timeout=10)
    assert wait_finished(qtbot, kit.app).status is State.STOPPED
    assert kit.executor.calls == []


def test_typing_after_approval_goes_to_the_field_the_user_expects(qtbot: Any, ui_env: Any, tmp_path: Path) -> None:
    """The overlay takes the keyboard focus to read Enter; the focus goes back before the text is typed."""
    server = ui_env
    text = "Grüße <b>x</b> $(id)"
    with TargetWindow.start(tmp_path / "target", x=300, y=300) as target:
        fx, fy = target.center("field")
        screen = Frame(np.zeros((server.height, server.width, 3), dtype=np.uint8),
                       Monitor(1, 0, 0, server.width, server.height))
        from holodesk.core.actions import Type

        script = write_script(tmp_path / "steps.jsonl",
                              [Click(frame_pixel_to_point(screen, fx, fy)), Type(text), Done("typed")])
        app = HolodeskApp(Settings(data_dir=tmp_path / "data"), hotkeys=False, dialogs=False,
                          policy_factory=lambda s, progress: ScriptedPolicy(script),
                          settings_path=tmp_path / "settings.toml")
        app.start()
        try:
            app.start_task("type into the field")
            for step in (0, 1):
                qtbot.waitUntil(lambda s=step: app.approval.pending is not None
                                and app.approval.pending.request.step == s, timeout=20000)
                overlay = app.approval.overlay
                qtbot.waitUntil(overlay.isActiveWindow, timeout=10000)
                if step == 1:  # the pointer leaves the field: focus must not depend on where it is
                    xdotool(server, "mousemove", "1500", "900")
                xdotool(server, "key", "Return")
            result = wait_finished(qtbot, app, timeout_ms=30000)
            assert result.status is State.FINISHED, result.reason
            qtbot.waitUntil(lambda: target.state().get("text") == text, timeout=5000)
        finally:
            app.shutdown(wait_s=10.0)


def test_new_hotkey_from_the_settings_dialog_works_at_once(qtbot: Any, ui_env: Any, make_app: Any) -> None:
    from PySide6.QtGui import QKeySequence

    from holodesk.ui.settings_dialog import HotkeyEdit

    kit = make_app([], hotkeys=True)
    app = kit.app
    dialog = app.open_settings()
    field = dialog.fields["hotkey_palette"].editor
    assert isinstance(field, HotkeyEdit)
    field.setKeySequence(QKeySequence("Ctrl+Alt+J"))  # what the capture field holds after Ctrl+Alt+J
    assert dialog.save()
    assert app.settings.hotkey_palette == "<ctrl>+<alt>+j" and app.hotkeys.combos["palette"] == "<ctrl>+<alt>+j"
    qtbot.wait(300)
    subprocess.run(["xdotool", "key", "--clearmodifiers", "ctrl+alt+j"], check=True, timeout=10)
    qtbot.waitUntil(app.palette.isVisible, timeout=5000)
    app.palette.hide()


def test_a_bad_hotkey_is_reported_not_ignored(qtbot: Any, make_app: Any) -> None:
    kit = make_app([], hotkeys=True, hotkey_palette="<ctrl>+<nosuchkey>+h")
    assert not kit.app.hotkeys.active
    qtbot.waitUntil(lambda: any(n.title == "Global hotkeys are not available" for n in kit.app.notifier.history),
                    timeout=10000)
    notice = next(n for n in kit.app.notifier.history if n.title == "Global hotkeys are not available")
    assert "<ctrl>+<nosuchkey>+h" in notice.text
