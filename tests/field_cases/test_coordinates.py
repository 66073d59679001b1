"""Field cases F01-F06: coordinates and screens.

Scaled desktops (Windows 125-200 %, Retina, monitors with different scales) cannot be produced under
Xvfb, so F01-F03 run the real Session, ScriptedPolicy (real parser), geometry and RecordingExecutor
over :class:`~tests.field_cases.fakes.FakePanel` layouts replayed by FakeCapture. F04 and F06 run for
real on Xvfb (xrandr monitors, the real pyautogui executor, a real Qt window).
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from holodesk.capture.fake import FakeCapture, load_image
from holodesk.capture.mss_backend import MssCapture
from holodesk.core.actions import Point
from holodesk.core.geometry import (
    Frame,
    InputPoint,
    Monitor,
    frame_pixel_to_input,
    frame_pixel_to_point,
    input_to_point,
    to_input_point,
)
from holodesk.errors import ActionError
from holodesk.session.episode import load_episode
from holodesk.session.state import SessionLimits, State
from tests.conftest import XvfbServer
from tests.field_cases.fakes import (
    FakePanel,
    StaleLayoutCapture,
    button_around,
    cell_inside,
    fake_input_cell,
    make_run,
    reply,
    single_frame_capture,
)
from tests.helpers.target import TargetWindow

ROOT = Path(__file__).resolve().parents[2]
SCALES = [1.0, 1.25, 1.5, 1.75, 2.0]


def click_at(point: Point) -> dict[str, Any]:
    return {"tool_name": "click", "x": point.x, "y": point.y}


# -- F01 ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("scale", SCALES)
def test_F01_scaled_display_click_lands_inside_the_button(scale: float) -> None:
    """2880x1620 panel at OS scale 1.0..2.0; a 40x24-logical button drawn at frame pixel (2000, 1000).
    The model points at the button's centre; the input point (logical) must fall inside the button."""
    panel = FakePanel((2880, 1620), scale)
    button = button_around((2000, 1000), (round(40 * scale), round(24 * scale)))
    frame = panel.frame([button])
    # The ratio is the frame's size over the monitor's input-space size (measured), e.g. 2880/1646.
    assert frame.scale == (2880 / panel.logical[0], 1620 / panel.logical[1])
    target = frame_pixel_to_point(frame, 2000, 1000)
    run = make_run([reply(click_at(target), "press the button"), reply(None, "pressed")],
                   single_frame_capture(frame))
    result = run.session.run("press the button")
    assert result.status is State.FINISHED, result
    (call,) = run.executor.calls
    (ip,) = call.input_points
    assert cell_inside(fake_input_cell(frame, ip), button), (ip, button)
    # The approval card showed exactly the point that was then used.
    assert run.approver.requests[0].input_points == (ip,)


def test_F01_scaled_display_175_percent_exact_values() -> None:
    panel = FakePanel((2880, 1620), 1.75)
    assert panel.logical == (1646, 926)
    frame = panel.frame()
    assert frame_pixel_to_input(frame, 2000, 1000) == InputPoint(1143, 571)
    point = frame_pixel_to_point(frame, 2000, 1000)
    assert point == Point(695, 618)
    # The model's point is quantised to 1/1000 of the frame: pixel (2001, 1001), input (1143, 572).
    assert to_input_point(frame, point) == InputPoint(1143, 572)


def test_F01_ratio_is_measured_from_the_frame_not_taken_from_a_setting() -> None:
    """The monitor's own physical-size hint is wrong here (says 1.0x); the frame's real size decides."""
    lying = Monitor(1, 0, 0, 1646, 926, physical_width=1646, physical_height=926)
    frame = Frame(np.zeros((1620, 2880, 3), np.uint8), lying)
    assert frame_pixel_to_input(frame, 2000, 1000) == InputPoint(1143, 571)
    # And the same monitor captured at 1:1 maps 1:1.
    same = Frame(np.zeros((926, 1646, 3), np.uint8), lying)
    assert frame_pixel_to_input(same, 1000, 500) == InputPoint(1000, 500)


@pytest.mark.parametrize("scale", SCALES)
def test_F01_every_model_point_lands_on_the_monitor(scale: float) -> None:
    frame = FakePanel((2880, 1620), scale, origin=(-1646, 0)).frame()
    mon = frame.monitor
    for x in (0, 1, 250, 500, 999, 1000):
        for y in (0, 1, 500, 999, 1000):
            ip = to_input_point(frame, Point(x, y))
            assert mon.contains(ip.x, ip.y), (x, y, ip)


# -- F02 ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("logical", "physical", "expected"),
    [
        ((1512, 982), (3024, 1964), (1000, 600)),  # Retina 2x (14" MacBook Pro default)
        ((1920, 1080), (3840, 2160), (1000, 600)),  # "looks like 1920x1080" on a 4K panel
        ((1680, 1050), (2880, 1800), (1166, 700)),  # non-integer ratio 1.714
    ],
)
def test_F02_retina_and_non_integer_ratios(logical: tuple[int, int], physical: tuple[int, int],
                                           expected: tuple[int, int]) -> None:
    panel = FakePanel(physical, physical[0] / logical[0])
    assert panel.logical == logical
    button = button_around((2000, 1200), (60, 40))
    frame = panel.frame([button])
    assert frame_pixel_to_input(frame, 2000, 1200) == InputPoint(*expected)
    run = make_run([reply(click_at(frame_pixel_to_point(frame, 2000, 1200))), reply(None, "ok")],
                   single_frame_capture(frame))
    assert run.session.run("click").status is State.FINISHED
    (ip,) = run.executor.calls[0].input_points
    assert cell_inside(fake_input_cell(frame, ip), button)
    if physical[0] % logical[0] == 0:  # integer ratios: the model's point lands on the stated input point
        assert (ip.x, ip.y) == expected


# -- F03 ------------------------------------------------------------------------------------------------
def _two_scales() -> tuple[FakePanel, FakePanel]:
    a = FakePanel((1920, 1080), 1.0, origin=(0, 0), index=1, name="FAKE-A")
    b = FakePanel((3840, 2160), 1.5, origin=(1920, 0), index=2, name="FAKE-B")
    return a, b


def test_F03_two_monitors_with_different_scales_use_the_frames_monitor() -> None:
    a, b = _two_scales()
    assert b.logical == (2560, 1440)
    button = button_around((3000, 1500), (60, 36))  # in B's physical pixels
    capture = FakeCapture({1: [a.image()], 2: [b.image([button])]}, [a.monitor(), b.monitor()])
    frame_b = capture.grab(2)
    target = frame_pixel_to_point(frame_b, 3000, 1500)
    run = make_run([reply(click_at(target)), reply(None, "ok")], capture, limits=SessionLimits(monitor=2))
    assert run.session.run("click on B").status is State.FINISHED
    call = run.executor.calls[0]
    assert call.frame.monitor == b.monitor()
    (ip,) = call.input_points
    assert ip == InputPoint(3919, 1001)  # 1920 + 2999/1.5, 1501/1.5: B's origin and B's scale
    assert b.monitor().contains(ip.x, ip.y) and not a.monitor().contains(ip.x, ip.y)
    assert cell_inside(fake_input_cell(call.frame, ip), button)
    request = run.approver.requests[0]
    assert request.input_points == (ip,)
    assert "(3919, 1001)" in request.description and "Monitor 2" in request.details[0]
    # The reverse map (used when the user edits the target on the overlay) comes back within one
    # model unit (1/1000 of B = 1.44 logical px), still on the button.
    back = to_input_point(frame_b, input_to_point(frame_b, ip.x, ip.y))
    assert abs(back.x - ip.x) <= 2 and abs(back.y - ip.y) <= 2
    assert cell_inside(fake_input_cell(frame_b, back), button)


# -- F04 ------------------------------------------------------------------------------------------------
THREE_MONITORS = [  # name, geometry for xrandr --setmonitor, (left, top, width, height)
    ("LEFT", "1280/338x800/211+0+280", (0, 280, 1280, 800)),
    ("MIDDLE", "1920/508x1080/286+1280+0", (1280, 0, 1920, 1080)),
    ("RIGHT", "1280/338x1024/271+3200+0", (3200, 0, 1280, 1024)),
]
TARGET_RGB = (0x33, 0x66, 0xCC)


@pytest.mark.slow
def test_F04_monitor_2_of_3_frame_label_and_origin(make_xvfb: Callable[..., XvfbServer], tmp_path: Path) -> None:
    """Three monitors (xrandr --setmonitor on one 4480x1080 Xvfb screen). `holodesk run --monitor 2`
    grabs monitor 2 (checked by content), names it in the approval text, and clicks at monitor 2's
    origin + the frame pixel: the real Qt button on monitor 2 receives the click."""
    server = make_xvfb(4480, 1080)
    for i, (name, geom, _rect) in enumerate(THREE_MONITORS):
        server.run("xrandr", "--setmonitor", name, geom, "screen" if i == 0 else "none")
    env = server.env()
    with MssCapture(display=server.display) as cap:
        assert [(m.left, m.top, m.width, m.height) for m in cap.monitors()] == [r for _n, _g, r in THREE_MONITORS]
        with TargetWindow.start(tmp_path, x=1280 + 500, y=400, env=env) as win:
            frame = cap.grab(2)
            assert (frame.monitor.left, frame.monitor.top) == (1280, 0)
            wx, wy, _w, _h = win.rects["window"]
            assert tuple(frame.pixels[wy + 5, wx - 1280 + 5]) == TARGET_RGB  # monitor 2 shows the window
            for other in (1, 3):
                assert not np.all(cap.grab(other).pixels == np.array(TARGET_RGB, np.uint8), axis=-1).any()
            cx, cy = win.center("OK")
            point = frame_pixel_to_point(frame, cx - 1280, cy)
            expected = to_input_point(frame, point)
            ok = win.rects["OK"]
            assert ok[0] <= expected.x < ok[0] + ok[2] and ok[1] <= expected.y < ok[1] + ok[3]
            script = tmp_path / "steps.jsonl"
            script.write_text(reply(click_at(point), "press OK") + "\n" + reply(None, "pressed") + "\n",
                              encoding="utf-8")
            res = subprocess.run(
                [sys.executable, "-m", "holodesk", "run", "press OK", "--script", str(script), "--monitor", "2",
                 "--episodes-dir", str(tmp_path / "episodes")],
                env=env, input="a\n", capture_output=True, text=True, timeout=120, cwd=ROOT)
            assert res.returncode == 0, res.stdout + res.stderr
            win.wait_for(lambda s: s["clicks"] == ["OK"], timeout=10)
    # The approval leads with the step in words, naming the window under the target; its details name
    # monitor 2 (mss gives no output name for xrandr monitors) and its origin.
    assert f"Step 1: Click at ({expected.x}, {expected.y}) in Holodesk test target" in res.stdout, res.stdout
    assert re.search(rf"Screen \({expected.x}, {expected.y}\) on Monitor 2(, \w+)?, 1920x1080 at \+1280\+0",
                     res.stdout), res.stdout
    assert f"left-clicked at ({expected.x}, {expected.y})" in res.stdout
    # The recorded frame of step 0 is monitor 2's content, not monitor 1's.
    episode = load_episode(next((tmp_path / "episodes").iterdir()))
    step0 = episode.steps[0]
    assert step0["monitor"]["index"] == 2 and step0["frame_size"] == [1920, 1080]
    frame_path = episode.frame_path(step0)
    assert frame_path is not None
    recorded = load_image(frame_path)
    assert tuple(recorded[wy + 5, wx - 1280 + 5]) == TARGET_RGB


# -- F05 ------------------------------------------------------------------------------------------------
OUTSIDE = [
    {"tool_name": "click", "x": 1001, "y": 500},
    {"tool_name": "click", "x": 500, "y": -1},
    {"tool_name": "double_click", "x": 1500, "y": 2000},
    {"tool_name": "drag", "start_x": 10, "start_y": 10, "end_x": 1200, "end_y": 10},
    {"tool_name": "scroll", "direction": "down", "x": -5, "y": 10},
]


@pytest.mark.parametrize("tool_call", OUTSIDE, ids=lambda c: f"{c['tool_name']}")
def test_F05_point_outside_the_image_is_rejected_quoting_the_raw_reply(tool_call: dict[str, Any]) -> None:
    frame = FakePanel((1920, 1080), 1.0).frame()
    raw = reply(tool_call, "try it")
    run = make_run([raw, reply(None, "giving up")], single_frame_capture(frame))
    result = run.session.run("click outside")
    assert run.executor.calls == [] and run.approver.requests == []  # never clamped, never substituted
    (warning,) = run.kinds("warning")
    assert "outside the image the model saw" in warning.message and "not clamped" in warning.message
    assert raw in warning.message  # the raw reply is quoted to the user
    assert warning.data["raw_text"] == raw
    assert result.status is State.FINISHED and result.answer == "giving up"


def test_F05_geometry_refuses_instead_of_clamping() -> None:
    frame = FakePanel((1920, 1080), 1.0).frame()
    with pytest.raises(ActionError, match="outside"):
        Point(1001, 0)
    with pytest.raises(ActionError, match="outside"):
        Point(0, -1)
    with pytest.raises(ActionError, match="outside"):
        frame_pixel_to_input(frame, 1920, 0)
    with pytest.raises(ActionError, match="not on"):
        input_to_point(frame, 1920, 10)


# -- F06 ------------------------------------------------------------------------------------------------
def _pointer(server: XvfbServer) -> tuple[int, int]:
    vals = dict(line.split("=", 1) for line in server.run("xdotool", "getmouselocation", "--shell").stdout.split())
    return int(vals["X"]), int(vals["Y"])


@pytest.mark.parametrize("kind", ["click", "double_click", "drag_end_unreachable"])
def test_F06_unreachable_target_fails_and_nothing_is_clicked_at_the_clamped_position(
        kind: str, xvfb: XvfbServer, tmp_path: Path) -> None:
    """The frame claims a 2400-wide monitor (the layout changed since capture: StaleLayoutCapture, a
    fake that replays a frame of the old layout while reporting the real current one) on the real
    1920-wide Xvfb screen. X clamps the pointer at x=1919, which is on the real Apply button. The real
    executor reads the pointer back and fails the action; Apply is never clicked, and for a drag the
    button is never even pressed. The model is told and answers, but the run ends FAILED, naming the
    step that could not be performed."""
    from holodesk.control.pyautogui_executor import PyAutoGUIExecutor

    executor = PyAutoGUIExecutor()
    executor.move_pointer_out_of_corner()
    with TargetWindow.start(tmp_path, x=1619, y=300) as win:
        ax, ay, aw, ah = win.rects["Apply"]
        assert ax <= 1919 < ax + aw  # the clamped x lies on Apply
        cy = ay + ah // 2
        stale = Frame(np.zeros((1080, 2400, 3), np.uint8), Monitor(1, 0, 0, 2400, 1080, name="FAKE-STALE"))
        far = frame_pixel_to_point(stale, 2300, cy)
        if kind == "drag_end_unreachable":
            tool = {"tool_name": "drag", **{f"start_{k}": v for k, v in click_at(
                frame_pixel_to_point(stale, ax + 6, cy)).items() if k != "tool_name"},
                "end_x": far.x, "end_y": far.y}
        else:
            tool = {**click_at(far), "tool_name": kind}
        run = make_run([reply(tool), reply(None, "stop")],
                       StaleLayoutCapture(stale, Monitor(1, 0, 0, 1920, 1080, name="real")), executor)
        result = run.session.run("press far right")
        (res_event,) = run.kinds("result")
        outcome = res_event.data["result"]
        assert (outcome.ok, outcome.status) == (False, "failed"), outcome
        assert "could not reach" in outcome.message
        assert outcome.details["pointer_readback"][0] == 1919
        assert outcome.details["target"][0] == to_input_point(stale, far).x > 1919
        # the run goes on and the model is told, but a run with a failed step never ends "finished"
        assert result.status is State.FAILED, result
        assert "could not be performed (step 1: the pointer could not reach" in result.reason
        time.sleep(0.4)
        assert win.state()["clicks"] == []


class FakeQScreen:
    """A fake QScreen: a name and a geometry in Qt logical pixels (what screen_for_monitor reads)."""

    def __init__(self, name: str, rect: tuple[int, int, int, int]) -> None:
        from PySide6.QtCore import QRect

        self._name = name
        self._rect = QRect(*rect)

    def name(self) -> str:
        return self._name

    def geometry(self) -> Any:
        return self._rect


@pytest.mark.parametrize("b_logical_origin", [(1920, 0), (1280, 0)], ids=["qt-origin-as-input", "qt-scaled-origin"])
def test_F03_overlay_marker_is_drawn_at_the_same_spot(b_logical_origin: tuple[int, int]) -> None:
    """The approval overlay covers B's QScreen (Qt logical pixels; B's device pixel ratio is 1.5) and
    draws its marker where the click will land: on the same button, and mapping back to the same input
    point. Qt may place B's logical origin elsewhere than the input origin (Windows device-independent
    pixels): the screen is then matched by name."""
    from holodesk.ui.overlay import OverlayGeometry, screen_for_monitor

    _a, b = _two_scales()
    button = button_around((3000, 1500), (60, 36))
    frame_b = b.frame([button])
    ip = to_input_point(frame_b, frame_pixel_to_point(frame_b, 3000, 1500))
    screens = [FakeQScreen("FAKE-A", (0, 0, 1920, 1080)), FakeQScreen("FAKE-B", (*b_logical_origin, 2560, 1440))]
    screen = screen_for_monitor(frame_b.monitor, screens)  # type: ignore[arg-type]
    assert screen is screens[1]
    geometry = OverlayGeometry(frame_b.monitor, screen.geometry())
    local = geometry.to_local(ip)
    dpr = 1.5  # B's physical pixels per Qt logical pixel
    marker_px = (local.x() * dpr, local.y() * dpr)  # where the marker's centre is painted on B's panel
    assert button[0] <= marker_px[0] < button[2] and button[1] <= marker_px[1] < button[3], marker_px
    assert geometry.to_input(local) == (ip.x, ip.y)
