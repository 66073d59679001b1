""""Click more precisely" on the real approval card: the session asks the policy's element localization for the
target's point in a close-up around the proposed point, shows the step again at the refined point, performs it
there, and the episode record says so.

The policy is a stand-in (:class:`LocalizingScript`): scripted agent-loop-v1 replies, and a localization answer
found in the crop it is sent (the red square's centre), written as the JSON reply a model gives and read by the
protocol's own localization parser. The executor records instead of clicking (the step's point is the subject).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PySide6.QtCore import Qt

from holodesk.capture.fake import FakeCapture
from holodesk.control.recording import RecordingExecutor
from holodesk.core.actions import Click, Point
from holodesk.core.geometry import Frame, Monitor, frame_pixel_to_point
from holodesk.policy.scripted import ScriptedPolicy
from holodesk.session.episode import load_episode
from holodesk.session.state import State
from tests.ui.conftest import FakeDesktopProbe, blank_frame, wait_finished, wait_overlay

pytestmark = pytest.mark.gui

RED = (220, 30, 30)
SQUARE = (1200, 700, 24, 24)  # left, top, width, height in frame pixels


def screen() -> np.ndarray:
    img = blank_frame()
    x, y, w, h = SQUARE
    img[y:y + h, x:x + w] = RED
    return img


class LocalizingScript(ScriptedPolicy):
    """Scripted replies, and element localization answered from the crop it is given."""

    def __init__(self, replies: list[str]) -> None:
        super().__init__(replies, protocol="agent-loop-v1")
        self.asked: list[tuple[tuple[int, ...], str]] = []

    def localize(self, image: Any, target: str) -> Point:
        prompt = self.protocol.localization_prompt(target)
        assert target in prompt and "Localize an element" in prompt
        self.asked.append((tuple(image.shape), target))
        ys, xs = np.nonzero(np.all(image == np.array(RED, np.uint8), axis=-1))
        height, width = image.shape[:2]
        reply = {"x": round((xs.mean() + 0.5) / width * 1000), "y": round((ys.mean() + 0.5) / height * 1000)}
        return self.protocol.parse_localization(json.dumps(reply))


def reply(tool_call: dict[str, Any]) -> str:
    return json.dumps({"note": None, "thought": "press the red square", "tool_call": tool_call})


@pytest.fixture
def make_refine_app(qtbot: Any, tmp_path: Path) -> Iterator[Any]:
    from holodesk.settings import Settings
    from holodesk.ui.app import HolodeskApp

    made: list[Any] = []

    def make(replies: list[str]) -> tuple[Any, LocalizingScript, RecordingExecutor]:
        policy = LocalizingScript(replies)
        rec = RecordingExecutor()
        cap = FakeCapture([screen()])
        settings = Settings(data_dir=tmp_path / "data", approval="step")
        app = HolodeskApp(settings, hotkeys=False, policy_factory=lambda s, progress: policy,
                          capture_factory=lambda _s: cap, executor_factory=lambda _s, _stop: rec,
                          settings_path=tmp_path / "config" / "settings.toml", dialogs=False,
                          focus_probe=lambda: "mousepad Mousepad", window_probe=FakeDesktopProbe("mousepad Mousepad"))
        app.guard.settle_s = 0.05
        made.append(app)
        app.start()
        return app, policy, rec

    yield make
    for app in made:
        app.shutdown(wait_s=10.0)
        if app.window is not None:
            app.window.deleteLater()
        app.palette.deleteLater()


def test_click_more_precisely_moves_the_point_onto_the_target(qtbot: Any, make_refine_app: Any) -> None:
    frame = Frame(screen(), Monitor(1, 0, 0, 1920, 1080))
    x, y, w, h = SQUARE
    off = frame_pixel_to_point(frame, x - 40, y - 30)  # the model's point misses the square
    app, policy, rec = make_refine_app([
        reply({"tool_name": "click_desktop", "element": "red square", "x": off.x, "y": off.y}),
        reply({"tool_name": "answer", "content": "pressed"}),
    ])
    app.start_task("press the red square")
    overlay = wait_overlay(qtbot, app)
    pending = app.approval.pending
    assert overlay.card.refine_button.isVisible() and pending.request.can_refine
    (before,) = pending.request.input_points
    assert not (x <= before.x < x + w and y <= before.y < y + h)
    qtbot.mouseClick(overlay.card.refine_button, Qt.MouseButton.LeftButton)
    # the step is shown again, at the refined point, on the real card
    qtbot.waitUntil(lambda: app.approval.pending is not None and app.approval.pending is not pending
                    and app.approval.overlay is not None and app.approval.overlay.isVisible(), timeout=10000)
    request = app.approval.pending.request
    (after,) = request.input_points
    assert x <= after.x < x + w and y <= after.y < y + h, (after, SQUARE)
    assert app.approval.overlay.card.description.text() == "Click ‘red square’ in Mousepad"
    assert f"Screen ({after.x}, {after.y})" in app.approval.overlay.card.details.text()
    assert policy.asked == [((540, 540, 3), "red square")]
    qtbot.keyClick(app.approval.overlay, Qt.Key.Key_Return)
    assert wait_finished(qtbot, app).status is State.FINISHED
    (call, *_rest) = rec.calls
    assert isinstance(call.action, Click) and call.input_points == (after,)
    episode = load_episode(next(Path(app.settings.episodes_dir).iterdir()))
    step = episode.steps[0]
    (refinement,) = step["refinements"]
    assert refinement["from"] == [off.x, off.y] and refinement["target"] == "red square"
    assert refinement["to"] == [call.action.point.x, call.action.point.y]
    assert step["refined_action"]["point"] == {"x": call.action.point.x, "y": call.action.point.y}


def test_no_button_without_the_models_words_for_the_target(qtbot: Any, make_refine_app: Any) -> None:
    app, policy, _rec = make_refine_app([
        reply({"tool_name": "write_desktop", "content": "hello"}),
        reply({"tool_name": "answer", "content": "typed"}),
    ])
    app.start_task("type hello")
    overlay = wait_overlay(qtbot, app)
    assert not overlay.card.refine_button.isVisible() and not app.approval.pending.request.can_refine
    qtbot.keyClick(overlay, Qt.Key.Key_Escape)
    assert wait_finished(qtbot, app).status is State.STOPPED
    assert policy.asked == []
