"""Fixtures for the Wayland (GNOME) tests: a private headless mutter session per test module and a
native GTK4 Wayland app per test (``tests/helpers/mutter.py``).

Without mutter/PipeWire installed the tests are skipped, unless ``CI`` is set, where that is an error
(``installers/_setup.sh`` installs them: ``APT_WAYLAND_TEST``).
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from holodesk.capture.pipewire_backend import MutterCapture
from holodesk.control.mutter_executor import MutterExecutor
from holodesk.core.actions import Move
from holodesk.core.geometry import Frame, frame_pixel_to_point, place, to_input_point
from holodesk.display.mutter import MutterRemoteDesktop
from tests.helpers.mutter import MutterSession, TargetApp, missing_programs, mutter_session


def _require_programs() -> None:
    missing = missing_programs()
    if missing:
        message = f"a headless GNOME Wayland session needs {', '.join(missing)} (installers/_setup.sh APT_WAYLAND_TEST)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="module")
def mutter() -> Iterator[MutterSession]:
    """A private headless mutter session (1280x800 virtual monitor ``Meta-0``) for the test module."""
    _require_programs()
    with mutter_session() as session:
        yield session


@dataclass
class GnomeDesktop:
    """Holodesk's Wayland backends on the test session: one remote-desktop session, its capture and executor."""

    remote: MutterRemoteDesktop
    capture: MutterCapture
    executor: MutterExecutor


@pytest.fixture(scope="module")
def gnome(mutter: MutterSession) -> Iterator[GnomeDesktop]:
    """The Mutter capture and executor on the module's session (closed afterwards)."""
    remote = MutterRemoteDesktop(mutter.bus_address, os.path.join(mutter.env["XDG_RUNTIME_DIR"], "pipewire-0"))
    capture = MutterCapture(remote)
    try:
        yield GnomeDesktop(remote, capture, MutterExecutor(remote))
    finally:
        capture.close()
        remote.close()


@pytest.fixture
def gtk_app(mutter: MutterSession) -> Iterator[TargetApp]:
    """A fresh GTK4 target app, fullscreen on the session (ended after the test)."""
    app = mutter.start_app()
    try:
        yield app
    finally:
        app.stop()


def wait_until_window_settled(executor: MutterExecutor, frame: Frame, app: TargetApp, timeout_s: float = 15.0) -> None:
    """Wait until pointer motion reaches the app at exactly the point it was sent to.

    A window that has just been mapped or made fullscreen can still carry a compositor transform for a
    moment (a click was once delivered 0.08 px off at the tail of a scale transition); until motion arrives
    exactly, exact click positions cannot be expected of anyone. Moves the pointer to two alternating points
    of the stripes area and reads the app's own motion report."""
    state = app.state()
    ax, ay, _w, _h = state["area"]
    k = state.get("scale_factor", 1)  # app (logical) pixels -> screen pixels (Mutter's physical layout mode)
    deadline = time.monotonic() + timeout_s
    for attempt in itertools.count():
        point = frame_pixel_to_point(frame, (ax + 40 + attempt % 2) * k, (ay + 30) * k)
        aim = to_input_point(frame, point)
        assert executor.execute(place(Move(point), frame)).ok
        expected = [(aim.x + 0.5) / k - ax, (aim.y + 0.5) / k - ay]
        try:
            app.wait_state(lambda s, e=expected: s.get("pointer") == e, timeout_s=0.5)
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
