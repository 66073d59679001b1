"""Time one frame on GNOME Wayland: request -> :class:`~holodesk.core.geometry.Frame` with the Mutter capture
backend (PipeWire stream -> GStreamer appsink in-process, BGRx -> RGB), in a private headless mutter session
with a native GTK4 app on screen. Not a test: it prints figures for docs/benchmarks.md.

Run from the repository root (needs the packages of ``installers/_setup.sh`` APT_WAYLAND and
APT_WAYLAND_TEST, and PyGObject in the venv)::

    PYTHONPATH=app:. .venv/bin/python docs/tools/bench_wayland_capture.py --size 1920x1080 --grabs 20

Reported: the first grab (stream start, then the input check), then ``--grabs`` grabs of an unchanged screen
(``--pause`` seconds apart) and ``--grabs`` grabs right after the app repainted (a click flips its colours),
each timed from the call to the returned Frame; median, 90th percentile and maximum in milliseconds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

from holodesk.capture.pipewire_backend import MutterCapture
from holodesk.control.mutter_executor import MutterExecutor
from holodesk.core.actions import Click
from holodesk.core.geometry import frame_pixel_to_point, place
from holodesk.display.mutter import MutterRemoteDesktop
from tests.helpers.mutter import mutter_session


def summary(times_ms: list[float]) -> dict[str, float]:
    """Median, 90th percentile and maximum of ``times_ms`` (milliseconds, one decimal)."""
    ordered = sorted(times_ms)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return {"median_ms": round(statistics.median(ordered), 1), "p90_ms": round(p90, 1),
            "max_ms": round(ordered[-1], 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="1920x1080", help="virtual monitor size, WIDTHxHEIGHT")
    parser.add_argument("--grabs", type=int, default=20, help="grabs per series")
    parser.add_argument("--pause", type=float, default=0.3, help="seconds between grabs of the unchanged screen")
    args = parser.parse_args()
    width, height = (int(v) for v in args.size.split("x"))
    with mutter_session(width, height) as session:
        app = session.start_app()
        remote = MutterRemoteDesktop(session.bus_address, os.path.join(session.env["XDG_RUNTIME_DIR"], "pipewire-0"))
        capture = MutterCapture(remote)
        executor = MutterExecutor(remote)
        try:
            t0 = time.perf_counter()
            frame = capture.grab(1)
            first_ms = (time.perf_counter() - t0) * 1000
            assert (frame.width, frame.height) == (width, height), (frame.width, frame.height)
            static: list[float] = []
            for _ in range(args.grabs):
                time.sleep(args.pause)  # grabs in use are one per step, seconds apart, not back to back
                t0 = time.perf_counter()
                capture.grab(1)
                static.append((time.perf_counter() - t0) * 1000)
            changed: list[float] = []
            cx, cy = app.center("area")
            for n in range(1, args.grabs + 1):
                executor.execute(place(Click(frame_pixel_to_point(frame, cx, cy)), frame))
                app.wait_state(lambda s, n=n: len(s["presses"]) == n)
                t0 = time.perf_counter()
                capture.grab(1)
                changed.append((time.perf_counter() - t0) * 1000)
        finally:
            capture.close()
            remote.close()
    result = {
        "size": f"{width}x{height}", "grabs": args.grabs, "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(), "load_average": [round(v, 2) for v in os.getloadavg()],
        "pause_s": args.pause, "first_grab_ms": round(first_ms, 1), "unchanged_screen": summary(static),
        "after_repaint": summary(changed),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
