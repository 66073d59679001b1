"""F20: with no tray host the app opens a window (never starts invisible); the tray probe tells why.

These run the real ``holodesk tray`` command / the probe in child processes on fresh Xvfb servers of their
own (this process's QApplication is bound to the shared UI display, which has a tray host).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from holodesk.core.actions import Answer
from holodesk.ui.icons import Status
from holodesk.ui.tray import TRAY_HELP
from tests.helpers.processes import stop_process
from tests.helpers.qt import wait_exposed
from tests.ui.conftest import start_trayer, wait_finished

pytestmark = pytest.mark.gui


def child_env(server: Any, tmp_path: Path) -> dict[str, str]:
    env = server.env()
    env.pop("QT_QPA_PLATFORM", None)
    env["HOLODESK_CONFIG"] = str(tmp_path / "config.toml")
    env["HOLODESK_DATA_DIR"] = str(tmp_path / "data")
    return env


def visible_windows(env: dict[str, str], name: str) -> list[str]:
    res = subprocess.run(["xdotool", "search", "--onlyvisible", "--name", name], env=env, capture_output=True,
                         text=True, timeout=10)
    return res.stdout.split()


def probe(env: dict[str, str]) -> dict[str, Any]:
    res = subprocess.run([sys.executable, "-m", "holodesk.ui.probe"], env=env, capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    return dict(json.loads(res.stdout.strip().splitlines()[-1]))


@contextmanager
def tray_app(env: dict[str, str], log_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``python -m holodesk tray`` (output to ``log_path``) running until the block ends."""
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "holodesk", "tray"], env=env, stdout=log,
                                stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        stop_process(proc)


def wait_visible(env: dict[str, str], name: str, proc: subprocess.Popen[bytes], log_path: Path) -> list[str]:
    """The visible windows named ``name`` once there is one (30 s at most, the app still running)."""
    deadline = time.monotonic() + 30
    found: list[str] = []
    while time.monotonic() < deadline and not found:
        assert proc.poll() is None, log_path.read_text()
        found = visible_windows(env, name)
        time.sleep(0.2)
    return found


def test_no_tray_host_opens_the_window(make_xvfb: Any, tmp_path: Path) -> None:
    server = make_xvfb(1280, 800)
    env = child_env(server, tmp_path)
    assert visible_windows(env, "^Holodesk$") == []
    log = tmp_path / "tray.log"
    with tray_app(env, log) as proc:
        found = wait_visible(env, "^Holodesk$", proc, log)
        assert found, "no visible 'Holodesk' window without a tray host"
        geo = subprocess.run(["xdotool", "getwindowgeometry", found[0]], env=env, capture_output=True, text=True,
                             timeout=10).stdout
        assert "Geometry: 380x" in geo  # the fallback window, not a stray dialog
        assert "no system tray available" in log.read_text()


def test_invalid_settings_are_shown_in_a_window_when_started_from_a_launcher(make_xvfb: Any, tmp_path: Path) -> None:
    """`holodesk tray` with a settings file it cannot load: the error goes to the terminal and into a window (a
    launcher has no terminal), and the app exits 2 once the window is closed."""
    server = make_xvfb(1024, 768)
    env = child_env(server, tmp_path)
    (tmp_path / "config.toml").write_text('approval = "autopilot"\n')
    log = tmp_path / "tray.log"
    with tray_app(env, log) as proc:
        found = wait_visible(env, "settings", proc, log)
        assert found, "no window shows the settings error"
        assert "approval" in log.read_text()  # the terminal has it too
        subprocess.run(["xdotool", "windowfocus", "--sync", found[0], "key", "Escape"], env=env, timeout=10, check=True)
        assert proc.wait(timeout=20) == 2


def test_probe_reports_no_tray_then_a_tray(make_xvfb: Any, tmp_path: Path) -> None:
    server = make_xvfb(1024, 768)
    env = child_env(server, tmp_path)
    status = probe(env)
    assert status["available"] is False and status["platform"] == "xcb"
    assert "no system tray host" in status["reason"] and "AppIndicator" in status["hint"]
    trayer = start_trayer(env)
    try:
        status = probe(env)
        assert status["available"] is True and status["reason"] == "a system tray host is running"
    finally:
        stop_process(trayer)


def test_probe_without_display_uses_offscreen(tmp_path: Path) -> None:
    from holodesk.ui import probe as probe_module

    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    assert probe_module._needs_offscreen(env)
    env["QT_QPA_PLATFORM"] = "offscreen"
    status = probe(env)
    assert status["available"] is False and status["platform"] == "offscreen"
    assert status["reason"].startswith("no display")


def test_forced_window_shows_every_action(qtbot: Any, make_app: Any) -> None:
    kit = make_app([], force_window=True)
    window = kit.app.window
    assert kit.app.tray is None and window is not None
    wait_exposed(qtbot, window)
    assert set(window.buttons) == {"new_task", "stop", "pause", "mode", "replay", "wizard", "settings", "history",
                                   "open_logs", "quit"}
    assert window.buttons["new_task"].defaultAction() is kit.app.actions.new_task
    assert "Started with --no-tray" in window.help_label.text()
    assert "AppIndicator" in TRAY_HELP
    window.buttons["new_task"].click()
    qtbot.waitUntil(kit.app.palette.isVisible, timeout=10000)
    kit.app.palette.hide()


def test_fallback_window_shows_its_whole_help_text(make_app: Any, qtbot: Any) -> None:
    """The how-to-enable-the-tray text wraps over several lines; the window must be tall enough for all of
    them (its last line, "Closing this window quits Holodesk.", used to be cut off)."""
    from holodesk.ui.tray import TRAY_HELP, FallbackWindow

    kit = make_app([], force_window=True)
    window = FallbackWindow(kit.app.actions, tray_missing=True)
    qtbot.addWidget(window)
    assert window.help_label.text() == TRAY_HELP
    window.show()
    wait_exposed(qtbot, window)
    label = window.help_label
    needed = label.heightForWidth(label.width())
    assert needed > label.fontMetrics().height() * 3  # really several lines
    assert label.height() >= needed
    assert label.geometry().bottom() <= window.rect().bottom()


def test_the_window_draws_each_status_icon_once(make_app: Any, qtbot: Any) -> None:
    """Status changes (several a task) show the pixmap drawn at the status's first change, not a new one each
    time: each new pixmap stays in Qt's pixmap cache (about 4.6 KiB a change, the app's memory grew by it task
    after task without a tray: the X11 soak)."""
    from holodesk.ui.icons import Status
    from holodesk.ui.tray import FallbackWindow

    kit = make_app([], force_window=True)
    window = FallbackWindow(kit.app.actions, tray_missing=True)
    qtbot.addWidget(window)
    keys: dict[Status, set[int]] = {}
    for _ in range(5):
        for status in (Status.THINKING, Status.AWAITING, Status.ACTING, Status.IDLE):
            window.set_status(status, "a detail")
            keys.setdefault(status, set()).add(window.status_icon.pixmap().cacheKey())
    assert all(len(k) == 1 for k in keys.values()) and len(set().union(*keys.values())) == 4, keys


def test_the_window_shows_the_mode_and_follows_the_autopilot(make_app: Any, qtbot: Any) -> None:
    """Issue 30: the window said "Mode: Step by step" while the autopilot was on (the settings' mode at start,
    a caller's task switching it); the mode has a line of its own that follows every change."""
    kit = make_app([], force_window=True, approval="auto")
    window = kit.app.window
    wait_exposed(qtbot, window)
    assert window.mode_label.text() == "Mode: Autopilot"
    kit.app.toggle_pause()
    assert window.mode_label.text() == "Mode: Autopilot (paused)"
    kit.app.set_mode("step")
    assert window.mode_label.text() == "Mode: Step by step"
    kit.app.actions.mode_auto.trigger()  # the Mode menu
    assert window.mode_label.text() == "Mode: Autopilot"
    kit.app._set_status(Status.THINKING, "thinking")  # a task's status words do not replace it
    assert window.mode_label.text() == "Mode: Autopilot" and window.detail_label.text() == "thinking"


def test_the_answer_and_errors_of_tasks_are_shown_in_the_window(make_app: Any, qtbot: Any) -> None:
    """Issue 30: without a tray, notices went nowhere (the tray balloon) and the model's answer was dropped;
    the window shows the last one. The test display has no window manager: the window is hidden while the
    task runs (nothing can minimise it) and shown again with the result."""
    kit = make_app([Answer("There are 42 files.")], force_window=True, end=False)
    window = kit.app.window
    wait_exposed(qtbot, window)
    assert kit.app.start_task("count the files")
    assert not window.isVisible() or window.isMinimized()  # out of the way while the task runs
    result = wait_finished(qtbot, kit.app)
    assert result.answer == "There are 42 files."
    qtbot.waitUntil(lambda: "There are 42 files." in window.message_view.toPlainText(), timeout=10000)
    assert window.message_view.toPlainText().startswith("Task finished\n")
    assert window.isVisible()

    failing = make_app(["this is not an action"], force_window=True, end=False, max_parse_failures=1)
    window = failing.app.window
    assert failing.app.start_task("do something")
    result = wait_finished(qtbot, failing.app)
    qtbot.waitUntil(lambda: window.message_view.toPlainText().startswith("Error: The task failed\n"), timeout=10000)
    assert result.reason in window.message_view.toPlainText()


def test_a_window_manager_that_does_not_minimise_is_waited_for_once(qtbot: Any, make_app: Any,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the window manager does not minimise the no-tray window before a task (here: iconify is not sent,
    as on a desktop without one), the window is hidden for the task after the wait, shown again after it, and
    hidden at once for the next task: the wait is paid once per process."""
    from holodesk.ui import app as app_module

    monkeypatch.setattr(app_module.x11, "iconify", lambda window_id: True)  # sent, never acted on
    monkeypatch.setattr(app_module, "MINIMISE_TIMEOUT_S", 1.0)
    kit = make_app([], force_window=True)
    window = kit.app.window
    wait_exposed(qtbot, window)
    t0 = time.monotonic()
    kit.app._window_out_of_the_way(True)
    assert time.monotonic() - t0 >= 1.0 and not window.isVisible() and kit.app.wm_minimises is False
    kit.app._window_out_of_the_way(False)
    assert window.isVisible()
    t0 = time.monotonic()
    kit.app._window_out_of_the_way(True)
    assert time.monotonic() - t0 < 0.5 and not window.isVisible()
    kit.app._window_out_of_the_way(False)
    assert window.isVisible()
