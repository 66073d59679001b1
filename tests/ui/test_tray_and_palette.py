"""Tray icon and menu follow the session; the palette starts tasks; worker errors become notifications."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QSystemTrayIcon

from holodesk.core.actions import Answer, Click, Point
from holodesk.errors import ModelLoadError
from holodesk.policy.base import Proposal
from holodesk.session.episode import load_episode
from holodesk.session.state import State
from holodesk.ui.icons import Status, status_icon
from tests.ui.conftest import wait_finished, wait_overlay

pytestmark = pytest.mark.gui

MENU = ["New task...", "Replay a file...", "Pause autopilot", "Stop", "Mode", "", "Setup wizard...", "Settings...",
        "History...", "Open logs", "", "Quit"]


def menu_texts(app: Any) -> list[str]:
    return [a.text() if not a.isSeparator() else "" for a in app.tray.menu.actions()]


def test_tray_exists_with_the_full_menu(make_app: Any) -> None:
    assert QSystemTrayIcon.isSystemTrayAvailable()  # trayer is running
    kit = make_app([])
    app = kit.app
    assert app.tray is not None and app.window is None
    assert app.tray.icon.isVisible()
    assert app.tray.icon.contextMenu() is app.tray.menu
    assert menu_texts(app) == MENU
    assert [a.text() for a in app.actions.mode_menu.actions()] == ["Step by step", "Autopilot"]


def test_icon_and_menu_follow_the_session_states(qtbot: Any, make_app: Any) -> None:
    kit = make_app([Click(Point(400, 400))])
    app = kit.app
    seen: list[Status] = []
    app.status_changed.connect(seen.append)
    assert app.tray.status is Status.IDLE and not app.actions.stop.isEnabled()
    app.start_task("click once")
    overlay = wait_overlay(qtbot, app)
    assert app.tray.status is Status.AWAITING
    assert app.tray.icon.icon().cacheKey() == status_icon(Status.AWAITING).cacheKey()
    assert "Waiting for your approval" in app.tray.icon.toolTip()
    assert app.actions.stop.isEnabled() and not app.actions.new_task.isEnabled()
    qtbot.keyClick(overlay, Qt.Key.Key_Return)
    assert wait_finished(qtbot, app).status is State.FINISHED
    assert Status.THINKING in seen and Status.ACTING in seen
    assert seen.index(Status.THINKING) < seen.index(Status.AWAITING) < seen.index(Status.ACTING)
    assert app.tray.status is Status.IDLE
    assert app.tray.icon.icon().cacheKey() == status_icon(Status.IDLE).cacheKey()
    qtbot.waitUntil(lambda: not app.actions.stop.isEnabled() and app.actions.new_task.isEnabled(), timeout=10000)


def test_failed_run_shows_error_icon_and_a_notification(qtbot: Any, make_app: Any) -> None:
    kit = make_app([Click(Point(10, 10))], end=False)  # script ends without Done -> policy error
    app = kit.app
    app.start_task("run out of script")
    qtbot.keyClick(wait_overlay(qtbot, app), Qt.Key.Key_Return)
    assert wait_finished(qtbot, app).status is State.FAILED
    assert app.tray.status is Status.ERROR
    qtbot.waitUntil(lambda: any(n.level == "error" for n in app.notifier.history), timeout=10000)
    err = [n for n in app.notifier.history if n.level == "error"][-1]
    assert "script exhausted" in err.text


def test_worker_exception_reaches_the_user(qtbot: Any, make_app: Any, tmp_path: Any,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # a FAKE nvidia-smi reporting a GPU the model fits (else the advice is the no-GPU one, see
    # tests/ui/test_errors_and_first_run.py)
    fake = tmp_path / "nvidia-smi"
    fake.write_text('#!/bin/sh\necho "0, NVIDIA H100, 81559, 80000"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    kit = make_app([])

    def broken_policy(settings: Any, progress: Any) -> Any:
        progress("Loading weights", 0.5)
        raise ModelLoadError("weights file is truncated", hint="Download the checkpoint again.")

    kit.app.policy_factory = broken_policy
    kit.app.start_task("anything")
    qtbot.waitUntil(lambda: any(n.level == "error" for n in kit.app.notifier.history), timeout=10000)
    err = [n for n in kit.app.notifier.history if n.level == "error"][-1]
    assert err.title == "The task could not run"
    assert err.text == "weights file is truncated" and err.hint == "Download the checkpoint again."
    assert err.remedies == ("wizard", "settings")
    assert kit.app.tray.status is Status.ERROR
    qtbot.waitUntil(lambda: not kit.app.runner.running, timeout=5000)


def test_tray_stop_stops_a_pending_approval(qtbot: Any, make_app: Any) -> None:
    kit = make_app([Click(Point(400, 400))])
    kit.app.start_task("click once")
    wait_overlay(qtbot, kit.app)
    kit.app.actions.stop.trigger()
    result = wait_finished(qtbot, kit.app)
    assert result.status is State.STOPPED
    assert kit.executor.calls == []
    qtbot.waitUntil(lambda: kit.app.approval.overlay is None or not kit.app.approval.overlay.isVisible(),
                    timeout=10000)
    # The record says the user stopped it (the menu's triggered(checked=False) once made it "stopped by False").
    end = load_episode(result.episode_path).end
    assert end["stopped_by"] == "user" and end["reason"] == "stopped by user", end


def test_a_stop_while_the_task_is_queued_starts_no_action_and_ends_its_record(qtbot: Any, make_app: Any) -> None:
    """A stop (the host's SIGTERM) arrives after the task was handed to the worker, while its session is
    still being built: the run performs nothing, and its record has an end naming who stopped it."""
    import threading

    kit = make_app([Click(Point(400, 400))], approval="auto", countdown=0.1)
    gate = threading.Event()

    def slow_build(progress: Any) -> Any:  # the session is built (the model loads) after the stop came
        assert gate.wait(30)
        return kit.app._build_session(progress)

    kit.app._task_settings = kit.app.settings
    kit.app.runner.start("queued when the stop came", slow_build)
    kit.app.stop(by="the MCP client (its host ended the server)")
    gate.set()
    result = wait_finished(qtbot, kit.app)
    assert result.status is State.STOPPED and result.steps == 0, result
    assert kit.executor.calls == []
    end = load_episode(result.episode_path).end
    assert end["stopped_by"] == "the MCP client (its host ended the server)", end
    # Once the app is shutting down (a signal), a task handed over later never starts.
    kit.app.shutdown()
    assert not kit.app.start_task("arrived after the signal")
    assert not kit.app.runner.running and kit.executor.calls == []


def test_mode_and_pause_from_the_menu(make_app: Any) -> None:
    kit = make_app([])
    app, a = kit.app, kit.app.actions
    assert app.approval_policy.mode == "step" and a.mode_step.isChecked() and not a.pause.isEnabled()
    a.mode_auto.trigger()
    assert app.approval_policy.mode == "auto" and a.mode_auto.isChecked() and a.pause.isEnabled()
    a.pause.trigger()
    assert app.approval_policy.paused and a.pause.text() == "Resume autopilot"
    a.pause.trigger()
    assert not app.approval_policy.paused and a.pause.text() == "Pause autopilot"
    a.mode_step.trigger()
    assert app.approval_policy.mode == "step" and not a.pause.isEnabled()


def test_palette_starts_the_typed_task(qtbot: Any, make_app: Any) -> None:
    kit = make_app([Click(Point(400, 400))])
    app = kit.app
    app.actions.new_task.trigger()
    qtbot.waitUntil(app.palette.isVisible, timeout=10000)
    qtbot.keyClick(app.palette.input, Qt.Key.Key_Return)  # empty: nothing starts
    assert not app.runner.running and app.palette.isVisible()
    qtbot.keyClicks(app.palette.input, "open the settings page")
    qtbot.keyClick(app.palette.input, Qt.Key.Key_Return)
    assert not app.palette.isVisible()
    overlay = wait_overlay(qtbot, app)
    qtbot.keyClick(overlay, Qt.Key.Key_Return)
    result = wait_finished(qtbot, app)
    assert result.status is State.FINISHED
    start = json.loads((result.episode_path / "episode.jsonl").read_text().splitlines()[0])
    assert start["task"] == "open the settings page"
    assert len(kit.executor.calls) == 1


def test_palette_escape_closes_without_a_task(qtbot: Any, make_app: Any) -> None:
    kit = make_app([])
    kit.app.open_palette()
    qtbot.waitUntil(kit.app.palette.isVisible, timeout=10000)
    qtbot.keyClicks(kit.app.palette.input, "never mind")
    qtbot.keyClick(kit.app.palette.input, Qt.Key.Key_Escape)
    assert not kit.app.palette.isVisible() and not kit.app.runner.running


def test_model_loading_shows_progress(qtbot: Any, make_app: Any) -> None:
    import threading

    kit = make_app([Click(Point(400, 400))])
    gate = threading.Event()

    def slow_policy(settings: Any, progress: Any) -> Any:
        progress("Downloading weights", 0.25)
        gate.wait(10)
        return kit.policy

    kit.app.policy_factory = slow_policy
    kit.app.start_task("needs a model")
    qtbot.waitUntil(lambda: kit.app._progress is not None and kit.app._progress.isVisible(), timeout=5000)
    dialog = kit.app._progress
    assert dialog.labelText() == "Downloading weights" and dialog.value() == 250
    assert kit.app.tray.status is Status.THINKING and "Downloading weights" in kit.app.tray.icon.toolTip()
    gate.set()
    overlay = wait_overlay(qtbot, kit.app)
    assert kit.app._progress is None  # closed once the session runs
    qtbot.keyClick(overlay, Qt.Key.Key_Escape)
    assert wait_finished(qtbot, kit.app).status is State.STOPPED


class _AnswersAtOncePolicy:
    """A FAKE policy that answers at once, every time; it keeps the settings it was built from."""

    name = "answers at once (fake)"

    def __init__(self, settings: Any) -> None:
        self.settings = settings
        self.closed = False

    def propose(self, observation: Any) -> Proposal:
        return Proposal(Answer("ok"), thought="nothing to do")

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize("change", [{"decoder": "stock"}, {"max_reply_tokens": 64}, {"max_string_chars": 80}])
def test_a_changed_policy_setting_builds_a_new_policy_for_the_next_task(
        qtbot: Any, make_app: Any, change: dict[str, Any]) -> None:
    """Settings that only the policy reads (the decoder, the reply length) apply from the next task on,
    without a restart; a setting the policy does not read keeps the loaded one."""
    kit = make_app([])
    app = kit.app
    built: list[_AnswersAtOncePolicy] = []

    def factory(settings: Any, progress: Any) -> Any:
        built.append(_AnswersAtOncePolicy(settings))
        return built[-1]

    app.policy_factory = factory

    def run_task() -> None:
        app.start_task("answer")
        qtbot.waitUntil(lambda: app.runner.running or app.last_result is not None, timeout=5000)
        assert wait_finished(qtbot, app).status is State.FINISHED
        app.last_result = None

    run_task()
    run_task()
    assert len(built) == 1  # same settings: the loaded policy is kept
    app.apply_settings(app.settings.model_copy(update={"approval": "auto", "max_steps": 5}))
    run_task()
    assert len(built) == 1  # settings the policy does not read
    app.apply_settings(app.settings.model_copy(update=change))
    run_task()
    assert len(built) == 2 and built[0].closed and not built[1].closed
    (name, value), = change.items()
    assert getattr(built[1].settings, name) == value


def test_the_start_balloon_names_the_hotkey_as_people_write_it(qtbot: Any, make_app: Any) -> None:
    kit = make_app([], hotkey_palette="<ctrl>+<alt>+h")
    qtbot.waitUntil(lambda: any(n.title == "Holodesk is running" for n in kit.app.notifier.history), timeout=10000)
    (notice,) = [n for n in kit.app.notifier.history if n.title == "Holodesk is running"]
    assert "Press Ctrl+Alt+H or click the tray icon" in notice.text, notice.text
    assert "<ctrl>" not in notice.text
