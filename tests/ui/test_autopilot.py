"""Autopilot: a visible countdown approves low-risk steps; Stop/Skip/Esc still work; high risk always asks."""

from __future__ import annotations

import time
from typing import Any

import pytest
from PySide6.QtCore import Qt

from holodesk.core.actions import Click, Key, Point
from holodesk.session.episode import load_episode
from holodesk.session.state import State
from tests.ui.conftest import wait_finished, wait_overlay

pytestmark = pytest.mark.gui


def steps_of(result: Any) -> list[dict[str, Any]]:
    return load_episode(result.episode_path).steps


def test_countdown_is_shown_then_the_autopilot_approves(qtbot: Any, make_app: Any) -> None:
    kit = make_app([Click(Point(300, 300))], approval="auto", countdown=1.0)
    kit.app.start_task("auto click")
    overlay = wait_overlay(qtbot, kit.app)
    shown_at = time.monotonic()
    assert overlay.card.countdown_label.isVisible() and overlay.card.countdown_bar.isVisible()
    assert overlay.card.countdown_label.text().startswith("Autopilot approves in")
    qtbot.wait(300)
    assert kit.executor.calls == []  # still counting down
    result = wait_finished(qtbot, kit.app)
    assert time.monotonic() - shown_at >= 0.9
    assert result.status is State.FINISHED
    assert [c.action for c in kit.executor.calls] == [Click(Point(300, 300))]
    assert steps_of(result)[0]["decided_by"] == "autopilot"


def test_escape_during_the_countdown_stops(qtbot: Any, make_app: Any) -> None:
    kit = make_app([Click(Point(300, 300))], approval="auto", countdown=3.0)
    kit.app.start_task("auto click")
    overlay = wait_overlay(qtbot, kit.app)
    qtbot.keyClick(overlay, Qt.Key.Key_Escape)
    assert wait_finished(qtbot, kit.app).status is State.STOPPED
    assert kit.executor.calls == []


def test_skip_during_the_countdown_skips(qtbot: Any, make_app: Any) -> None:
    kit = make_app([Click(Point(300, 300))], approval="auto", countdown=3.0)
    kit.app.start_task("auto click")
    qtbot.keyClick(wait_overlay(qtbot, kit.app), Qt.Key.Key_S)
    result = wait_finished(qtbot, kit.app)
    assert result.status is State.FINISHED and kit.executor.calls == []
    assert steps_of(result)[0]["decision"] == "skip"


def test_high_risk_waits_for_an_explicit_approval(qtbot: Any, make_app: Any) -> None:
    kit = make_app([Key(("enter",))], approval="auto", countdown=0.2)
    kit.app.start_task("press enter")
    overlay = wait_overlay(qtbot, kit.app)
    assert not overlay.card.countdown_label.isVisible()
    assert overlay.card.risk_badge.text() == "HIGH RISK"
    qtbot.wait(800)  # far past the countdown: still waiting
    assert kit.app.approval.pending is not None and kit.executor.calls == []
    qtbot.keyClick(overlay, Qt.Key.Key_Return)
    result = wait_finished(qtbot, kit.app)
    assert [c.action for c in kit.executor.calls] == [Key(("enter",))]
    assert steps_of(result)[0]["decided_by"] == "user"


def test_paused_autopilot_asks_the_user(qtbot: Any, make_app: Any) -> None:
    kit = make_app([Click(Point(300, 300))], approval="auto", countdown=0.2)
    kit.app.toggle_pause()
    kit.app.start_task("auto click while paused")
    overlay = wait_overlay(qtbot, kit.app)
    assert not overlay.card.countdown_label.isVisible()
    qtbot.wait(600)
    assert kit.executor.calls == []
    qtbot.keyClick(overlay, Qt.Key.Key_Return)
    assert steps_of(wait_finished(qtbot, kit.app))[0]["decided_by"] == "user"


def test_stop_hotkey_signal_stops_during_countdown(qtbot: Any, make_app: Any) -> None:
    kit = make_app([Click(Point(300, 300))], approval="auto", countdown=3.0)
    kit.app.start_task("auto click")
    wait_overlay(qtbot, kit.app)
    kit.app.hotkeys.stop_requested.emit()  # what the global stop hotkey emits
    assert wait_finished(qtbot, kit.app).status is State.STOPPED
    assert kit.executor.calls == []


def test_p_during_the_countdown_pauses_the_autopilot(qtbot: Any, make_app: Any) -> None:
    kit = make_app([Click(Point(300, 300)), Click(Point(600, 600))], approval="auto", countdown=1.0)
    kit.app.start_task("pause me")
    overlay = wait_overlay(qtbot, kit.app)
    qtbot.keyClick(overlay, Qt.Key.Key_P)
    assert kit.app.approval_policy.paused and kit.app.actions.pause.text() == "Resume autopilot"
    assert not overlay.card.countdown_label.isVisible()
    qtbot.wait(1500)  # past the countdown: nothing ran
    assert kit.executor.calls == []
    qtbot.keyClick(overlay, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: kit.app.approval.pending is not None
                    and kit.app.approval.pending.request.step == 1, timeout=10000)
    second = kit.app.approval.overlay
    assert not second.card.countdown_label.isVisible()  # later steps ask too while paused
    qtbot.keyClick(second, Qt.Key.Key_Return)
    result = wait_finished(qtbot, kit.app)
    assert [s["decided_by"] for s in steps_of(result)[:2]] == ["user", "user"]


def test_unknown_window_asks_and_the_card_says_why(qtbot: Any, make_app: Any) -> None:
    """F23: where no window is known (no window manager, nothing under the pointer: the probes return
    None) the autopilot does not approve even a click; the card shows the reason."""
    kit = make_app([Click(Point(300, 300))], approval="auto", countdown=0.2, focused_window=None)
    kit.app.start_task("click while the window is unknown")
    overlay = wait_overlay(qtbot, kit.app)
    assert not overlay.card.countdown_label.isVisible()
    assert overlay.card.risk_badge.text() == "HIGH RISK"
    assert "no known window" in overlay.card.risk_reason.text()
    qtbot.wait(600)  # past the countdown: still waiting
    assert kit.executor.calls == []
    qtbot.keyClick(overlay, Qt.Key.Key_Return)
    result = wait_finished(qtbot, kit.app)
    assert steps_of(result)[0]["decided_by"] == "user"
    assert "no known window" in steps_of(result)[0]["risk"]["reason"]
