"""FakeCapture: replays PNGs / arrays for fake monitor layouts (no display needed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from holodesk.capture.fake import FakeCapture
from holodesk.core.actions import Point
from holodesk.core.geometry import Monitor, to_input_point
from holodesk.errors import CaptureError


def _solid(h: int, w: int, value: int) -> np.ndarray:
    return np.full((h, w, 3), value, dtype=np.uint8)


def test_replays_pngs_in_order_and_repeats_the_last(tmp_path: Path) -> None:
    for i, value in enumerate((10, 20, 30)):
        Image.fromarray(_solid(60, 80, value)).save(tmp_path / f"{i:03d}.png")
    cap = FakeCapture.from_directory(tmp_path)
    assert cap.monitors() == [Monitor(1, 0, 0, 80, 60, name="Fake monitor 1")]
    seen = [int(cap.grab(1).pixels[0, 0, 0]) for _ in range(5)]
    assert seen == [10, 20, 30, 30, 30]
    assert cap.grab_counts == {1: 5}


def test_per_monitor_frames_and_fake_scaled_layout() -> None:
    """F03-style layout: A 1920x1080 at scale 1, B 2560x1440 input space with a 3840x2160 frame."""
    a = Monitor(1, 0, 0, 1920, 1080, name="A")
    b = Monitor(2, 1920, 0, 2560, 1440, name="B")
    cap = FakeCapture({1: [_solid(1080, 1920, 1)], 2: [_solid(2160, 3840, 2)]}, monitors=[a, b])
    frame_b = cap.grab(2)
    assert frame_b.monitor is b
    assert frame_b.pixels.shape == (2160, 3840, 3) and frame_b.pixels[0, 0, 0] == 2
    assert frame_b.scale == (1.5, 1.5)
    centre = to_input_point(frame_b, Point(500, 500))
    assert (centre.x, centre.y) == (1920 + 1280, 720)
    assert cap.grab(1).pixels[0, 0, 0] == 1


def test_grabbed_frames_are_copies() -> None:
    cap = FakeCapture([_solid(4, 4, 7)])
    f = cap.grab(1)
    f.pixels[:] = 0
    assert cap.grab(1).pixels[0, 0, 0] == 7


def test_errors() -> None:
    with pytest.raises(CaptureError, match="at least one image"):
        FakeCapture([])
    with pytest.raises(CaptureError, match="uint8"):
        FakeCapture([np.zeros((4, 4), dtype=np.uint8)])
    with pytest.raises(CaptureError, match="unknown fake monitors"):
        FakeCapture({3: [_solid(4, 4, 0)]}, monitors=[Monitor(1, 0, 0, 4, 4)])
    cap = FakeCapture([_solid(4, 4, 0)])
    with pytest.raises(CaptureError, match="valid monitor indices are 1"):
        cap.grab(2)
    with pytest.raises(CaptureError, match="cannot read image"):
        FakeCapture([Path("/nonexistent/frame.png")])
