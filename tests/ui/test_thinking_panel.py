"""The model's thought grows on the thinking panel while the step is proposed, before the approval card comes;
then the card shows the proposal as before and the panel is gone.

The policy is the real ScriptedPolicy, whose stream hands its thought out word by word; a test double holds
it after each word until the test lets it go (a model still generating), so what the panel shows between two
words is checked. The executor records instead of clicking."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt

from holodesk.capture.fake import FakeCapture
from holodesk.control.recording import RecordingExecutor
from holodesk.policy.base import ThoughtSink
from holodesk.policy.scripted import ScriptedPolicy
from holodesk.session.state import State
from tests.ui.conftest import FakeDesktopProbe, blank_frame, wait_finished, wait_overlay

pytestmark = pytest.mark.gui


class HeldScript(ScriptedPolicy):
    """ScriptedPolicy whose thought pieces each wait for :attr:`go` (released by the test) after reaching the
    session's sink."""

    def __init__(self, replies: list[str]) -> None:
        self.go = threading.Semaphore(0)
        super().__init__(replies, protocol="agent-loop-v1")

    @property  # type: ignore[override]
    def thought_sink(self) -> ThoughtSink | None:
        return self._held

    @thought_sink.setter
    def thought_sink(self, sink: ThoughtSink | None) -> None:
        def held(piece: str) -> None:
            assert sink is not None
            sink(piece)
            assert self.go.acquire(timeout=20), "the test never let the model go on"

        self._held = held if sink is not None else None


@pytest.fixture
def app_with(qtbot: Any, tmp_path: Path) -> Iterator[Any]:
    from holodesk.settings import Settings
    from holodesk.ui.app import HolodeskApp

    made: list[Any] = []

    def make(policy: ScriptedPolicy) -> tuple[Any, RecordingExecutor]:
        rec = RecordingExecutor()
        cap = FakeCapture([blank_frame()])
        settings = Settings(data_dir=tmp_path / "data", approval="step")
        app = HolodeskApp(settings, hotkeys=False, policy_factory=lambda s, progress: policy,
                          capture_factory=lambda _s: cap, executor_factory=lambda _s, _stop: rec,
                          settings_path=tmp_path / "config" / "settings.toml", dialogs=False,
                          focus_probe=lambda: "mousepad Mousepad", window_probe=FakeDesktopProbe("mousepad Mousepad"))
        app.guard.settle_s = 0.05
        made.append(app)
        app.start()
        return app, rec

    yield make
    for app in made:
        app.shutdown(wait_s=10.0)
        if app.window is not None:
            app.window.deleteLater()
        if app.approval.thinking is not None:
            app.approval.thinking.deleteLater()
        app.palette.deleteLater()


def test_the_thought_grows_on_the_panel_before_the_card_shows_the_proposal(qtbot: Any, app_with: Any) -> None:
    policy = HeldScript([
        "<think>The dialog asks to save.</think>" + json.dumps(
            {"note": None, "thought": "press Save", "tool_call": {"tool_name": "click_desktop", "element": "Save",
                                                                   "x": 500, "y": 500}}),
        json.dumps({"note": None, "thought": "", "tool_call": {"tool_name": "answer", "content": "saved"}}),
    ])
    app, rec = app_with(policy)
    app.start_task("save the file")

    def panel_says(text: str) -> bool:
        panel = app.approval.thinking
        return panel is not None and panel.isVisible() and panel.thought.text() == f"Model's thought: {text}"

    qtbot.waitUntil(lambda: panel_says("The"), timeout=10000)
    assert app.approval.thinking.title.text() == "Step 1 · Thinking…"
    assert app.approval.pending is None  # the proposal has not come: no card yet
    policy.go.release()
    qtbot.waitUntil(lambda: panel_says("The dialog"), timeout=10000)
    assert app.approval.pending is None
    for _ in range(4):  # " asks", " to", " save." and the last piece's own wait
        policy.go.release()
    overlay = wait_overlay(qtbot, app)
    assert overlay.card.thought.text() == "Model's thought: press Save"
    qtbot.waitUntil(lambda: not app.approval.thinking.isVisible(), timeout=5000)
    qtbot.keyClick(overlay, Qt.Key.Key_Return)
    for _ in range(10):  # the answer step's thought is empty: nothing waits, but stray permits are harmless
        policy.go.release()
    assert wait_finished(qtbot, app).status is State.FINISHED
    assert len(rec.calls) == 1
