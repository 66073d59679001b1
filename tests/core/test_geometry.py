"""Geometry: the one conversion from model space to OS input space, on scaled, offset and multi-monitor
layouts (fake monitor layouts: this machine has one unscaled virtual screen)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from holodesk.core.actions import Point
from holodesk.core.geometry import (
    Frame,
    InputPoint,
    Monitor,
    frame_pixel_to_point,
    input_to_point,
    point_to_frame_pixel,
    to_input_point,
)
from holodesk.errors import ActionError, CaptureError


def frame_of(width: int, height: int, monitor: Monitor) -> Frame:
    return Frame(np.zeros((height, width, 3), np.uint8), monitor)


def test_unscaled_single_monitor_maps_pixel_for_pixel() -> None:
    mon = Monitor(1, 0, 0, 1920, 1080)
    frame = frame_of(1920, 1080, mon)
    assert to_input_point(frame, Point(500, 500)) == InputPoint(960, 540)
    assert to_input_point(frame, Point(0, 0)) == InputPoint(0, 0)
    assert to_input_point(frame, Point(1000, 1000)) == InputPoint(1919, 1079)


@pytest.mark.parametrize("scale", [1.0, 1.25, 1.5, 1.75, 2.0])
def test_scaled_display_lands_inside_the_button(scale: float) -> None:
    # A 2880x1620 panel; the OS input space is the panel divided by the scale (logical pixels, rounded).
    logical_w, logical_h = round(2880 / scale), round(1620 / scale)
    mon = Monitor(1, 0, 0, logical_w, logical_h)
    frame = frame_of(2880, 1620, mon)
    # A 60x30 button drawn at frame pixels centred on (2000, 1000).
    point = frame_pixel_to_point(frame, 2000, 1000)
    hit = to_input_point(frame, point)
    bx0, bx1 = (2000 - 30) / (2880 / logical_w), (2000 + 30) / (2880 / logical_w)
    by0, by1 = (1000 - 15) / (1620 / logical_h), (1000 + 15) / (1620 / logical_h)
    assert bx0 <= hit.x <= bx1 and by0 <= hit.y <= by1, (scale, hit)


def test_retina_2x_maps_to_points() -> None:
    mon = Monitor(1, 0, 0, 1512, 982)
    frame = frame_of(3024, 1964, mon)
    hit = to_input_point(frame, frame_pixel_to_point(frame, 2000, 1200))
    assert abs(hit.x - 1000) <= 1 and abs(hit.y - 600) <= 1


def test_offset_monitor_adds_its_origin() -> None:
    # Monitor B, 3840x2160 physical at 1.5 -> 2560x1440 input space, right of a 1920x1080 monitor A.
    b = Monitor(2, 1920, 0, 2560, 1440)
    frame = frame_of(3840, 2160, b)
    assert frame.scale == (1.5, 1.5)
    hit = to_input_point(frame, Point(500, 500))
    assert hit == InputPoint(1920 + 1280, 720)
    assert b.contains(hit.x, hit.y)


def test_negative_origin_monitor() -> None:
    left = Monitor(2, -1280, 200, 1280, 800)
    frame = frame_of(1280, 800, left)
    assert to_input_point(frame, Point(0, 0)) == InputPoint(-1280, 200)


@pytest.mark.parametrize("bad", [(-1, 10), (10, 1001), (1001, 0), (0, -5)])
def test_points_outside_model_space_are_rejected_not_clamped(bad: tuple[int, int]) -> None:
    with pytest.raises(ActionError, match="outside"):
        Point(*bad)


@pytest.mark.parametrize("bad", [("500", 1), (1.5, 2), (True, 3), (None, 4)])
def test_points_must_be_integers(bad: tuple[object, object]) -> None:
    with pytest.raises(ActionError, match="integer"):
        Point(*bad)  # type: ignore[arg-type]


def test_frame_requires_rgb_shape() -> None:
    with pytest.raises(CaptureError):
        Frame(np.zeros((10, 10), np.uint8), Monitor(1, 0, 0, 10, 10))


def test_input_to_point_rejects_points_off_the_monitor() -> None:
    mon = Monitor(2, 1920, 0, 1920, 1080)
    frame = frame_of(1920, 1080, mon)
    with pytest.raises(ActionError, match="not on Monitor 2"):
        input_to_point(frame, 100, 100)
    back = to_input_point(frame, input_to_point(frame, 2500, 300))
    # model space has 1001 steps across 1920 px, so the round trip is exact to within 2 px
    assert abs(back.x - 2500) <= 2 and abs(back.y - 300) <= 2


@given(
    fw=st.integers(200, 7680), fh=st.integers(200, 4320),
    scale=st.sampled_from([1.0, 1.25, 1.5, 1.75, 2.0, 2.5]),
    left=st.integers(-4000, 4000), top=st.integers(-2000, 2000),
    x=st.integers(0, 1000), y=st.integers(0, 1000),
)
def test_every_point_lands_on_its_monitor_near_the_exact_position(
    fw: int, fh: int, scale: float, left: int, top: int, x: int, y: int
) -> None:
    mon = Monitor(1, left, top, max(1, round(fw / scale)), max(1, round(fh / scale)))
    frame = frame_of(fw, fh, mon)
    hit = to_input_point(frame, Point(x, y))
    assert mon.contains(hit.x, hit.y)
    exact_x = left + x / 1000 * mon.width
    exact_y = top + y / 1000 * mon.height
    assert abs(hit.x - exact_x) <= 1.5 and abs(hit.y - exact_y) <= 1.5
    px, py = point_to_frame_pixel(frame, Point(x, y))
    assert 0 <= px < fw and 0 <= py < fh
