"""Child process for the device-pixel-ratio test: show the approval overlay for a click at an input-space
point on ``$DISPLAY`` (Qt may run scaled, e.g. ``QT_SCALE_FACTOR=2``) and report what is on screen there.

    python tests/ui/apps/overlay_at_point.py X Y

Prints one JSON line: {"dpr": float, "screen": [x, y, w, h] (Qt logical), "monitor": [l, t, w, h] (mss,
input space), "input_point": [x, y], "pixel": [r, g, b] grabbed with mss at the input point,
"hole": [r, g, b] grabbed 10 logical pixels right of it, inside the ring's hole}.
"""

from __future__ import annotations

import json
import sys
import time

from PySide6.QtCore import QCoreApplication
from PySide6.QtWidgets import QApplication

from holodesk.capture.mss_backend import MssCapture
from holodesk.core.actions import Click
from holodesk.core.geometry import frame_pixel_to_point, place
from holodesk.core.risk import Risk, RiskAssessment
from holodesk.policy.base import Proposal
from holodesk.session.approval import make_request
from holodesk.ui.approval import ApprovalController
from holodesk.ui.workers import PendingDecision, WindowGuard


def main() -> int:
    x, y = int(sys.argv[1]), int(sys.argv[2])
    app = QApplication([sys.argv[0]])
    capture = MssCapture()
    frame = capture.grab(1)
    sx, sy = frame.scale
    point = frame_pixel_to_point(frame, (x - frame.monitor.left) * sx, (y - frame.monitor.top) * sy)
    request = make_request(0, Proposal(Click(point)), place(Click(point), frame),
                           RiskAssessment(Risk.LOW, "pointer action"), "step")
    controller = ApprovalController(WindowGuard())
    controller.present(PendingDecision(request, "user"))
    end = time.monotonic() + 1.5
    while time.monotonic() < end:
        QCoreApplication.processEvents()
        time.sleep(0.01)
    ip = request.input_points[0]
    shot = capture.grab(1)
    screen = app.primaryScreen()
    g = screen.geometry()
    m = frame.monitor
    dpr = screen.devicePixelRatio()
    print(json.dumps({
        "dpr": screen.devicePixelRatio(), "screen": [g.x(), g.y(), g.width(), g.height()],
        "monitor": [m.left, m.top, m.width, m.height], "input_point": [ip.x, ip.y],
        # the target pixel itself stays unpainted (its label stays readable); the pointers above and
        # below it sit on its column: their middles (28 logical px away) are marked, 5 px beside them not
        "pixel": [int(v) for v in shot.pixels[ip.y - m.top, ip.x - m.left]],
        "above": [int(v) for v in shot.pixels[ip.y - m.top - round(28 * dpr), ip.x - m.left]],
        "below": [int(v) for v in shot.pixels[ip.y - m.top + round(28 * dpr), ip.x - m.left]],
        "beside": [[int(v) for v in shot.pixels[ip.y - m.top + sy * round(28 * dpr),
                                                ip.x - m.left + sx * round(5 * dpr)]]
                   for sx in (-1, 1) for sy in (-1, 1)],
    }))
    capture.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
