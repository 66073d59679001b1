"""Holodesk's own windows are never a target on GNOME Wayland: the Mutter executor refuses a click whose point
is on a window of class ``Holodesk`` (as Qt names every Holodesk window; on a Wayland session Holodesk's UI
runs through XWayland), and clicks another program's window at the same kind of point.

Real headless mutter with Xwayland; two Tk forms run through XWayland: one of WM_CLASS class ``Holodesk`` (a
stand-in for the overlay or the no-tray window), one of its own class. What arrived is read from each
form's own click count. The clicks come from a process of its own (``tests/wayland/own_window_clicks.py``),
as from a Holodesk process on that desktop.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.mutter import MutterSession, mutter_session
from tests.helpers.processes import stop_process

pytestmark = [pytest.mark.wayland]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def mutter_x() -> Iterator[MutterSession]:
    """A headless mutter session that also serves X11 clients through Xwayland."""
    from tests.wayland.conftest import _require_programs

    _require_programs()
    if not Path("/usr/bin/Xwayland").exists():
        message = "this test needs Xwayland (package xwayland, installers/_setup.sh APT_WAYLAND_TEST)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    with mutter_session(xwayland=True) as session:
        yield session


def wait_layout(path: Path, proc: subprocess.Popen[bytes], predicate: Any, timeout_s: float = 60.0) -> dict[str, Any]:
    """The Tk form's layout report once ``predicate`` holds for it."""
    deadline = time.monotonic() + timeout_s
    while True:
        assert proc.poll() is None, f"the Tk form exited with {proc.returncode}"
        try:
            layout = dict(json.loads(path.read_text(encoding="utf-8")))
            if predicate(layout):
                return layout
        except (FileNotFoundError, json.JSONDecodeError):
            layout = {}
        assert time.monotonic() < deadline, f"the Tk form's layout never matched: {layout}"
        time.sleep(0.05)


def start_form(session: MutterSession, layout: Path, x: int, wm_class: str) -> subprocess.Popen[bytes]:
    """tests/apps/tk_form.py through XWayland at (x, 60), with WM_CLASS class ``wm_class``."""
    return subprocess.Popen([sys.executable, str(ROOT / "tests" / "apps" / "tk_form.py"), "--layout", str(layout),
                             "--x", str(x), "--y", "60", "--wm-class", wm_class], env=session.env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_click_on_a_holodesk_window_is_refused_and_another_window_is_clicked(mutter_x: MutterSession,
                                                                           tmp_path: Path) -> None:
    own_layout, other_layout = tmp_path / "own.json", tmp_path / "other.json"
    own = start_form(mutter_x, own_layout, 60, "Holodesk")
    other = start_form(mutter_x, other_layout, 700, "HolodeskTkForm")
    try:
        mapped = lambda lay: "Count" in lay.get("rects", {}) and lay.get("window", [0, 0, 0, 0])[2] > 1  # noqa: E731
        own_count = wait_layout(own_layout, own, mapped)["rects"]["Count"]
        other_count = wait_layout(other_layout, other, mapped)["rects"]["Count"]
        env = {**mutter_x.env, "PYTHONPATH": os.pathsep.join([str(ROOT / "app"), str(ROOT)])}
        res = subprocess.run([sys.executable, "-m", "tests.wayland.own_window_clicks",
                              ",".join(map(str, own_count)), ",".join(map(str, other_count))],
                             env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr
        refused, done = json.loads(res.stdout.strip().splitlines()[-1])
        assert not refused["ok"] and refused["status"] == "failed", (refused, res.stderr[-2000:])
        assert "Holodesk's own window" in refused["message"] and "nothing was done" in refused["message"], refused
        assert done["ok"], (done, res.stderr[-2000:])
        wait_layout(other_layout, other, lambda lay: lay.get("count") == 1)  # the other program got its click
        assert wait_layout(own_layout, own, lambda lay: True)["count"] == 0  # Holodesk's window got nothing
    finally:
        stop_process(own)
        stop_process(other)
