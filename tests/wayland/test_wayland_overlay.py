"""The approval overlay on GNOME Wayland: the desktop app's UI runs through XWayland (a Wayland client cannot
place a window at the click point or keep it above a fullscreen app), the overlay appears over a fullscreen
native GTK4 app at the proposed point, and never in a frame grabbed inside the Session's capture hooks with
the Mutter capture backend (``tests/apps/wayland_overlay_probe.py`` runs as a child in the session)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.mutter import MutterSession, mutter_session
from tests.wayland.conftest import _require_programs

pytestmark = [pytest.mark.wayland]

ROOT = Path(__file__).resolve().parents[2]
PROBE = ROOT / "tests" / "apps" / "wayland_overlay_probe.py"


@pytest.fixture(scope="module")
def mutter_x() -> Iterator[MutterSession]:
    """A headless mutter session that also serves X11 clients through Xwayland."""
    _require_programs()
    if not Path("/usr/bin/Xwayland").exists():
        message = "the overlay test needs Xwayland (package xwayland, installers/_setup.sh APT_WAYLAND_TEST)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    with mutter_session(xwayland=True) as session:
        yield session


def test_overlay_shows_at_the_point_over_a_fullscreen_app_and_never_in_the_frame(mutter_x: MutterSession) -> None:
    app = mutter_x.start_app()
    try:
        env = {**mutter_x.env, "PYTHONPATH": os.pathsep.join([str(ROOT / "app"), str(ROOT)])}
        env.pop("QT_QPA_PLATFORM", None)
        res = subprocess.run([sys.executable, str(PROBE)], env=env, capture_output=True, text=True, timeout=120,
                             cwd=ROOT)
        assert res.returncode == 0, res.stdout + res.stderr
        report = json.loads(res.stdout.strip().splitlines()[-1])
        assert report["platform"] == "xcb"  # the UI went through XWayland on its own
        assert report["before"] == 0  # nothing else on the screen has the marker colour
        assert report["visible"] > 50 and report["again"] > 50, report  # the overlay is really on screen
        assert report["managed"] is True  # Mutter manages it (so the guard can wait for Mutter to let go)
        x0, y0, x1, y1 = report["marker_box"]
        ix, iy = report["input_point"]
        assert x0 <= ix <= x1 and y0 <= iy <= y1, report  # its marks sit on the proposed point
        assert report["hidden"] == [0] * 5, report  # never in a hooked grab
        assert report["hide_count"] == 5
        assert app.state()["clicks"] == 0  # the app under it was not touched
    finally:
        app.stop()
