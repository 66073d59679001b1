"""Click the centre of each rectangle given, through Holodesk's Mutter executor, as a Holodesk process on the
GNOME Wayland session of its environment does (with XWayland's ``DISPLAY``), for
``tests/wayland/test_own_windows_wayland.py``.

``python -m tests.wayland.own_window_clicks X,Y,W,H ...``: one JSON line on stdout, a list of
``{"ok", "status", "message"}``, one per rectangle, in order.

A process of its own: python-xlib keeps the event classes of X extensions in one table per process, so a
process that has talked to an X server with another extension set (the test's Xvfb servers) cannot open
XWayland's display; a Holodesk process talks to one X server.
"""

from __future__ import annotations

import json
import sys

from holodesk.capture.pipewire_backend import MutterCapture
from holodesk.control.mutter_executor import MutterExecutor
from holodesk.core.actions import Click
from holodesk.core.geometry import frame_pixel_to_point, place
from holodesk.display.mutter import MutterRemoteDesktop


def main(rects: list[tuple[int, int, int, int]]) -> int:
    remote = MutterRemoteDesktop()
    capture = MutterCapture(remote)
    try:
        executor = MutterExecutor(remote)
        frame = capture.grab(1)
        results = []
        for x, y, w, h in rects:
            result = executor.execute(place(Click(frame_pixel_to_point(frame, x + w // 2, y + h // 2)), frame))
            results.append({"ok": result.ok, "status": result.status, "message": result.message})
    finally:
        capture.close()
        remote.close()
    print(json.dumps(results), flush=True)
    return 0


def rect(arg: str) -> tuple[int, int, int, int]:
    """``"X,Y,W,H"`` -> ``(x, y, w, h)``."""
    x, y, w, h = (int(v) for v in arg.split(","))
    return x, y, w, h


if __name__ == "__main__":
    sys.exit(main([rect(arg) for arg in sys.argv[1:]]))
