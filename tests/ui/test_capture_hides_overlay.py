"""F13: the overlay never appears in the frame the policy receives.

Real screen grabs with mss (MssCapture) on the UI display while the overlay shows a marker in a
distinctive colour: present on screen when not hidden, absent from the grabbed frame when the Session's
before_capture / after_capture hooks hide it.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

from holodesk.capture.mss_backend import MssCapture
from holodesk.control.recording import RecordingExecutor
from holodesk.core.actions import Click, Done, Point
from holodesk.core.geometry import place
from holodesk.core.risk import Risk, RiskAssessment
from holodesk.policy.base import Observation, Proposal
from holodesk.session.approval import ApprovalPolicy, ApprovalResponse, Decision, make_request
from holodesk.session.loop import Session
from holodesk.session.state import SessionLimits, State
from holodesk.ui.approval import ApprovalController
from holodesk.ui.theme import THEME
from holodesk.ui.workers import PendingDecision, WindowGuard
from tests.helpers.qt import rgb, wait_exposed

pytestmark = pytest.mark.gui

MARK = THEME.palette.marker
MARK_RGB = rgb(MARK)


def marker_pixels(pixels: np.ndarray) -> int:
    """How many pixels of an RGB frame have exactly the marker colour."""
    return int(np.all(pixels == np.array(MARK_RGB, dtype=np.uint8), axis=-1).sum())


class FrameKeepingPolicy:
    """Fake policy: keeps every frame it is given and answers Done."""

    name = "frame-keeping fake"

    def __init__(self) -> None:
        self.frames: list[Any] = []

    def propose(self, observation: Observation) -> Proposal:
        self.frames.append(observation.frame)
        return Proposal(Done("seen"), thought="fake")

    def close(self) -> None:
        pass


def show_overlay(qtbot: Any, capture: MssCapture, guard: WindowGuard) -> tuple[ApprovalController, Any]:
    frame = capture.grab(1)
    proposal = Proposal(Click(Point(500, 500)), thought="a marker for the capture test")
    request = make_request(0, proposal, place(proposal.action, frame), RiskAssessment(Risk.LOW, "pointer action"),
                           "step")
    controller = ApprovalController(guard, marker_color=MARK)
    pending = PendingDecision(request, "user")
    controller.present(pending)
    overlay = controller.overlay
    assert overlay is not None
    wait_exposed(qtbot, overlay)
    qtbot.wait(150)
    return controller, pending


def grab_on_worker(fn: Any) -> Any:
    """Run ``fn`` on a plain worker thread (as the Session does) while the GUI thread keeps running."""
    from PySide6.QtCore import QCoreApplication

    out: dict[str, Any] = {}

    def work() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:
            out["error"] = exc

    t = threading.Thread(target=work)
    t.start()
    while t.is_alive():
        QCoreApplication.processEvents()
        t.join(0.005)
    if "error" in out:
        raise out["error"]
    return out["value"]


def test_marker_on_screen_but_not_in_the_hooked_grab(qtbot: Any) -> None:
    capture = MssCapture()
    guard = WindowGuard(settle_s=0.1)
    try:
        assert marker_pixels(capture.grab(1).pixels) == 0  # nothing else on screen has the colour
        controller, pending = show_overlay(qtbot, capture, guard)
        visible = grab_on_worker(lambda: capture.grab(1))
        assert marker_pixels(visible.pixels) > 50  # the marker really is on screen

        def hooked_grab() -> Any:
            guard.before_capture()
            try:
                return capture.grab(1)
            finally:
                guard.after_capture()

        hidden = grab_on_worker(hooked_grab)
        assert marker_pixels(hidden.pixels) == 0
        qtbot.waitUntil(lambda: controller.overlay is not None and controller.overlay.isVisible(), timeout=10000)
        qtbot.wait(150)
        again = grab_on_worker(lambda: capture.grab(1))
        assert marker_pixels(again.pixels) > 50  # shown again after the grab
        pending.resolve(ApprovalResponse(Decision.STOP))
        controller.close()
    finally:
        capture.close()


def test_the_policy_receives_frames_without_the_overlay(qtbot: Any) -> None:
    capture = MssCapture()
    guard = WindowGuard(settle_s=0.1)
    policy = FrameKeepingPolicy()
    try:
        controller, pending = show_overlay(qtbot, capture, guard)
        session = Session(policy, capture, RecordingExecutor(),
                          ApprovalPolicy("step", lambda r: ApprovalResponse(Decision.STOP)),
                          SessionLimits(max_steps=3), before_capture=guard.before_capture,
                          after_capture=guard.after_capture)
        result = grab_on_worker(lambda: session.run("look at the screen"))
        assert result.status is State.FINISHED
        assert len(policy.frames) == 1
        assert marker_pixels(policy.frames[0].pixels) == 0
        assert guard.hide_count == 1  # the overlay was visible and got hidden for the grab
        assert controller.overlay is not None and controller.overlay.isVisible()
        pending.resolve(ApprovalResponse(Decision.STOP))
        controller.close()
    finally:
        capture.close()


def test_tray_balloons_are_hidden_for_the_grab(qtbot: Any, make_app: Any) -> None:
    """Qt draws its own balloon where no notification service exists; it must not reach the model either."""
    from PySide6.QtWidgets import QApplication

    def balloons() -> list[Any]:
        return [w for w in QApplication.topLevelWidgets()
                if w.isVisible() and w.metaObject().className() == "QBalloonTip"]

    kit = make_app([])
    kit.app.notifier.info("A notice", "shown as a tray balloon")
    qtbot.waitUntil(lambda: bool(balloons()), timeout=5000)
    grab_on_worker(kit.app.guard.before_capture)
    assert balloons() == []
    grab_on_worker(kit.app.guard.after_capture)


def test_every_holodesk_window_is_hidden_for_the_grab_but_not_the_tray_icon(qtbot: Any, make_app: Any) -> None:
    """The no-tray window, dialogs and the palette are not for the model either; the tray icon (embedded
    in the desktop's tray) stays, and the windows come back after the grab."""
    from PySide6.QtWidgets import QApplication

    kit = make_app([], force_window=True)
    app = kit.app
    window = app.window
    settings = app.open_settings()
    wait_exposed(qtbot, window)
    wait_exposed(qtbot, settings)
    tray_sys = [w for w in QApplication.topLevelWidgets() if w.metaObject().className() == "QSystemTrayIconSys"]
    grab_on_worker(app.guard.before_capture)
    assert not window.isVisible() and not settings.isVisible()
    assert all(w.isVisible() for w in tray_sys)
    grab_on_worker(app.guard.after_capture)
    qtbot.waitUntil(lambda: window.isVisible() and settings.isVisible(), timeout=10000)
    settings.close()


def test_windows_come_back_after_each_step_and_only_the_overlay_goes(qtbot: Any, make_app: Any) -> None:
    from PySide6.QtCore import Qt

    from tests.ui.conftest import wait_finished, wait_overlay

    kit = make_app([Click(Point(300, 300)), Click(Point(700, 700))], force_window=True)
    window = kit.app.window
    settings = kit.app.open_settings()
    wait_exposed(qtbot, window)
    wait_exposed(qtbot, settings)
    kit.app.start_task("two steps")
    for step in (0, 1):
        qtbot.waitUntil(lambda s=step: kit.app.approval.pending is not None
                        and kit.app.approval.pending.request.step == s, timeout=10000)
        overlay = wait_overlay(qtbot, kit.app)
        assert settings.isVisible()  # shown again after the grab
        assert not window.isVisible() or window.isMinimized()  # the no-tray window is out of the task's way
        qtbot.keyClick(overlay, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda o=overlay: not o.isVisible(), timeout=5000)  # the decided overlay is gone
    assert wait_finished(qtbot, kit.app).status is State.FINISHED
    qtbot.waitUntil(lambda: window.isVisible() and not window.isMinimized(), timeout=10000)  # back after the task
    assert kit.app.guard.hide_count >= 3  # the dialog was hidden for each of the 3 grabs
    settings.close()
