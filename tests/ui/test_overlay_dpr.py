"""The overlay marks the exact input-space pixel at device pixel ratios 1 and 2 (QT_SCALE_FACTOR under a
fresh Xvfb, in a child process because the ratio is fixed when a QApplication starts), and the pure
input-space <-> overlay mapping for fake layouts (F01-F03) that Xvfb cannot show."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QPointF, QRect

from holodesk.core.geometry import InputPoint, Monitor
from holodesk.ui.overlay import OverlayGeometry
from holodesk.ui.theme import THEME
from tests.helpers.qt import rgb

pytestmark = pytest.mark.gui

CHILD = Path(__file__).resolve().parent / "apps" / "overlay_at_point.py"
MARK = list(rgb(THEME.palette.marker))


@pytest.mark.parametrize("scale_factor", ["1", "2"])
def test_marker_on_the_input_pixel_at_each_dpr(make_xvfb: Any, scale_factor: str) -> None:
    server = make_xvfb(1280, 800)
    env = server.env()
    env.pop("QT_QPA_PLATFORM", None)
    env["QT_SCALE_FACTOR"] = scale_factor
    res = subprocess.run([sys.executable, str(CHILD), "800", "500"], env=env, capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["dpr"] == float(scale_factor)
    assert out["screen"][2] == 1280 // int(scale_factor)  # Qt's logical pixels really are scaled
    assert out["monitor"] == [0, 0, 1280, 800] and out["input_point"] == [800, 500]
    assert out["pixel"] != MARK  # the target itself is left unpainted (its label stays readable) ...
    assert out["above"] == MARK and out["below"] == MARK  # ... the pointers aim at its column ...
    assert all(px != MARK for px in out["beside"])  # ... and no more than 5 px wide


@pytest.mark.parametrize(
    ("monitor", "screen", "point", "local"),
    [
        # X11 at DPR 1: input space = Qt logical pixels.
        (Monitor(1, 0, 0, 1920, 1080), QRect(0, 0, 1920, 1080), InputPoint(960, 540), (960.5, 540.5)),
        # F03: right monitor 3840x2160 at x=1920, Qt scaling 1.5 -> logical 2560x1440 at x=1920.
        (Monitor(2, 1920, 0, 3840, 2160), QRect(1920, 0, 2560, 1440), InputPoint(1920 + 3000, 1500),
         (3000.5 / 1.5, 1500.5 / 1.5)),
        # macOS-style points: input space is logical already.
        (Monitor(1, 0, 0, 1512, 982), QRect(0, 0, 1512, 982), InputPoint(1000, 600), (1000.5, 600.5)),
        # F04: monitor 2 of 3 with an offset origin.
        (Monitor(2, 1280, 280, 1920, 1080), QRect(1280, 280, 1920, 1080), InputPoint(1280 + 10, 280 + 20),
         (10.5, 20.5)),
    ],
)
def test_geometry_maps_both_ways(monitor: Monitor, screen: QRect, point: InputPoint,
                                 local: tuple[float, float]) -> None:
    geo = OverlayGeometry(monitor, screen)
    got = geo.to_local(point)
    assert got.x() == pytest.approx(local[0]) and got.y() == pytest.approx(local[1])
    assert geo.to_input(got) == (point.x, point.y)
    assert geo.to_input(QPointF(0, 0)) == (monitor.left, monitor.top)
    assert geo.to_input(QPointF(screen.width() - 0.01, screen.height() - 0.01)) == (
        monitor.left + monitor.width - 1, monitor.top + monitor.height - 1)
