"""RecordingExecutor (a fake): records the placed input points as given, scripted failures."""

from __future__ import annotations

import numpy as np

from holodesk.control.base import ActionResult
from holodesk.control.recording import RecordingExecutor
from holodesk.core.actions import Click, Drag, Point, Type
from holodesk.core.geometry import Frame, InputPoint, Monitor, place


def _frame() -> Frame:
    # monitor 2 of a layout: origin (1920, 0), 1280x720 input space, 2560x1440 frame (scale 2)
    return Frame(np.zeros((1440, 2560, 3), np.uint8), Monitor(2, 1920, 0, 1280, 720))


def test_records_actions_with_input_points() -> None:
    ex = RecordingExecutor()
    frame = _frame()
    r1 = ex.execute(place(Click(Point(500, 500)), frame))
    r2 = ex.execute(place(Drag(Point(0, 0), Point(1000, 1000)), frame))
    r3 = ex.execute(place(Type("hi"), frame))
    assert r1.ok and r1.status == "performed" and r1.details["input_points"] == [[1920 + 640, 360]]
    assert r2.ok and ex.calls[1].input_points == (InputPoint(1920, 0), InputPoint(1920 + 1279, 719))
    assert r3.ok and ex.calls[2].input_points == ()
    assert [type(a).__name__ for a in ex.actions] == ["Click", "Drag", "Type"]
    assert ex.calls[0].frame is frame


def test_scripted_failures() -> None:
    ex = RecordingExecutor({0: ActionResult(ok=False, status="stopped_by_user", message="corner")})
    ex.fail_at(2, "no such button")
    frame = _frame()
    results = [ex.execute(place(Click(Point(1, 1)), frame)) for _ in range(3)]
    assert [(r.ok, r.status) for r in results] == [(False, "stopped_by_user"), (True, "performed"),
                                                   (False, "failed")]
    assert results[2].message == "no such button"
    assert len(ex.calls) == 3
