"""Child process for the Wayland overlay test, run inside a GNOME Wayland session with XWayland: Qt picks
its platform as the desktop app does (``holodesk.ui.app._prefer_xwayland``), shows the approval overlay
(the theme's marker colour) for a click at the monitor's centre and grabs the screen with the Mutter capture
backend: plainly, inside the Session's capture hooks (``WindowGuard.before_capture`` / ``after_capture``)
five times, and plainly again; grabs run on a worker thread as in the Session.

    python tests/apps/wayland_overlay_probe.py

Prints one JSON line: {"before", "visible", "hidden" (list), "again": marker pixels per grab; "platform":
Qt's platform; "managed": whether the window manager listed the overlay while shown; "marker_box":
[x0, y0, x1, y1] of the marker in the visible grab; "input_point": [x, y] of the proposed click}.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

import numpy as np
from PySide6.QtCore import QCoreApplication
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QApplication

from holodesk.capture.pipewire_backend import MutterCapture
from holodesk.core.actions import Click, Point
from holodesk.core.geometry import place
from holodesk.core.risk import Risk, RiskAssessment
from holodesk.display.mutter import MutterRemoteDesktop
from holodesk.policy.base import Proposal
from holodesk.session.approval import ApprovalResponse, Decision, make_request
from holodesk.ui import x11
from holodesk.ui.app import _prefer_xwayland
from holodesk.ui.approval import ApprovalController
from holodesk.ui.theme import THEME
from holodesk.ui.workers import PendingDecision, WindowGuard

MARK = THEME.palette.marker
MARK_RGB = np.array(QColor(MARK).getRgb()[:3], dtype=np.uint8)


def marker_pixels(pixels: Any) -> int:
    return int(np.all(pixels == MARK_RGB, axis=-1).sum())


def on_worker(fn: Any) -> Any:
    """Run ``fn`` on a worker thread while this (GUI) thread keeps processing events."""
    out: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: out.update(value=fn()))
    worker.start()
    while worker.is_alive():
        QCoreApplication.processEvents()
        worker.join(0.005)
    return out["value"]


def settle(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        QCoreApplication.processEvents()
        time.sleep(0.01)


def main() -> int:
    _prefer_xwayland(os.environ)
    app = QApplication([sys.argv[0]])
    remote = MutterRemoteDesktop()
    capture = MutterCapture(remote)
    guard = WindowGuard(settle_s=0.1)
    try:
        frame = on_worker(lambda: capture.grab(1))
        before = marker_pixels(frame.pixels)
        request = make_request(0, Proposal(Click(Point(500, 500))), place(Click(Point(500, 500)), frame),
                               RiskAssessment(Risk.LOW, "pointer action"), "step")
        controller = ApprovalController(guard, marker_color=MARK)
        pending = PendingDecision(request, "user")
        controller.present(pending)
        settle(1.0)
        visible = on_worker(lambda: capture.grab(1))

        def hooked() -> Any:
            guard.before_capture()
            try:
                return capture.grab(1)
            finally:
                guard.after_capture()

        overlay = controller.overlay
        managed = x11.window_managed(int(overlay.winId())) if overlay is not None else None
        hidden = []
        for _ in range(5):
            hidden.append(marker_pixels(on_worker(hooked).pixels))
            settle(0.3)
        again = on_worker(lambda: capture.grab(1))
        pending.resolve(ApprovalResponse(Decision.STOP))
        controller.close()
        ys, xs = np.nonzero(np.all(visible.pixels == MARK_RGB, axis=-1))
        box = [int(xs.min()), int(ys.min()), int(xs.max()), int(ys.max())] if xs.size else None
        ip = request.input_points[0]
        print(json.dumps({"before": before, "visible": marker_pixels(visible.pixels), "hidden": hidden,
                          "again": marker_pixels(again.pixels), "hide_count": guard.hide_count,
                          "platform": app.platformName(), "managed": managed, "marker_box": box,
                          "input_point": [ip.x, ip.y]}))
    finally:
        capture.close()
        remote.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
