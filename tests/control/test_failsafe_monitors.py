"""The fail-safe corners are the corners of every monitor, not only of the whole X screen (issue 30).

Real: the session's Xvfb (1920x1080, the display pyautogui is bound to) split into two monitors of
different sizes and offsets with ``xrandr --setmonitor`` (restored afterwards), the real Session and
PyAutoGUIExecutor, and the Qt target window. The user pushes the pointer (xdotool) into a corner while
the approval prompt is up; the run must stop before the approved click: the target counts no click and
the X server's pointer is still in the corner. Pure: :func:`failsafe_points`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from holodesk.capture.mss_backend import MssCapture
from holodesk.control.pointer import failsafe_points
from holodesk.control.pyautogui_executor import PyAutoGUIExecutor
from holodesk.core.geometry import frame_pixel_to_point
from holodesk.session.approval import ApprovalRequest, ApprovalResponse
from holodesk.session.state import State
from tests.conftest import XvfbServer
from tests.field_cases.fakes import SpyApprover, make_run, reply
from tests.helpers.target import TargetWindow

#: Left monitor 1000x700 at (0, 380); right monitor 920x900 at (1000, 0): the screen's top-left and
#: bottom-right corners lie outside both monitors.
LEFT = (0, 380, 1000, 700)
RIGHT = (1000, 0, 920, 900)
#: Monitor corners that are not screen corners (the screen's own have their own test, F12).
MONITOR_CORNERS = [(0, 380), (999, 380), (999, 1079), (1000, 0), (1000, 899), (1919, 899)]


def test_failsafe_points_are_the_corners_of_the_screen_and_of_each_monitor() -> None:
    points = failsafe_points((1920, 1080), [LEFT, RIGHT])
    assert points[:4] == [(0, 0), (0, 1079), (1919, 0), (1919, 1079)]
    assert set(points) == {(0, 0), (0, 1079), (1919, 0), (1919, 1079), (0, 380), (999, 380), (999, 1079),
                           (1000, 0), (1000, 899), (1919, 899)}
    assert len(points) == len(set(points))  # shared corners once
    assert failsafe_points((800, 600), []) == [(0, 0), (0, 599), (799, 0), (799, 599)]


@pytest.fixture
def two_monitors(xvfb: XvfbServer) -> Iterator[None]:
    """Declare LEFT and RIGHT on the session's server; afterwards its single "screen" monitor is back."""
    def rect(r: tuple[int, int, int, int]) -> str:
        return f"{r[2]}/{r[2] // 4}x{r[3]}/{r[3] // 4}+{r[0]}+{r[1]}"

    xvfb.run("xrandr", "--setmonitor", "HOLODESK-L", rect(LEFT), "screen")
    xvfb.run("xrandr", "--setmonitor", "HOLODESK-R", rect(RIGHT), "none")
    try:
        yield
    finally:
        xvfb.run("xrandr", "--delmonitor", "HOLODESK-L", check=False)
        xvfb.run("xrandr", "--delmonitor", "HOLODESK-R", check=False)
        xvfb.run("xdotool", "mousemove", "500", "500")


class PushIntoCorner(SpyApprover):
    """The user pushes the pointer into ``corner`` (xdotool) while the approval prompt is up, then approves."""

    def __init__(self, xvfb: XvfbServer, corner: tuple[int, int]) -> None:
        super().__init__()
        self.xvfb, self.corner = xvfb, corner

    def __call__(self, request: ApprovalRequest) -> ApprovalResponse:
        self.xvfb.run("xdotool", "mousemove", str(self.corner[0]), str(self.corner[1]))
        return super().__call__(request)


def pointer(xvfb: XvfbServer) -> tuple[int, int]:
    out = xvfb.run("xdotool", "getmouselocation", "--shell").stdout
    values = dict(line.split("=", 1) for line in out.split())
    return int(values["X"]), int(values["Y"])


def test_each_monitor_corner_stops_the_run_before_the_next_action(xvfb: XvfbServer, two_monitors: None,
                                                                   tmp_path: Path) -> None:
    executor = PyAutoGUIExecutor()
    with TargetWindow.start(tmp_path, x=200, y=500) as win, MssCapture() as cap:
        frame = cap.grab(1)
        assert (frame.monitor.left, frame.monitor.top, frame.monitor.width, frame.monitor.height) == LEFT
        ok = frame_pixel_to_point(frame, *win.center("OK"))
        for corner in MONITOR_CORNERS:
            run = make_run([reply({"tool_name": "click", "x": ok.x, "y": ok.y}), reply(None, "clicked")], cap,
                           executor, approver=PushIntoCorner(xvfb, corner), stop_event=executor.stop_event)
            result = run.session.run("press OK")
            assert result.status is State.STOPPED, (corner, result)
            assert "fail-safe" in result.reason
            assert pointer(xvfb) == corner  # nothing moved the pointer on to the button
            assert win.state()["clicks"] == [], corner


def test_doctor_names_the_monitors_whose_corners_stop_a_run(xvfb: XvfbServer, two_monitors: None) -> None:
    from holodesk import doctor

    report = doctor._monitors()  # the doctor's "Monitors" section alone (the whole report takes ~20 s)
    assert report["fail-safe corners (X11)"] == ("the screen's and those of 2 monitor(s): 1000x700+0+380, "
                                                  "920x900+1000+0"), report
