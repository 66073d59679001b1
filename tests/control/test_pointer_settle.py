"""F22: the executor's pointer settle logic, with fake pointer readbacks (sequences of positions) instead
of a display. The real-desktop counterpart is tests/field_cases/test_real_desktop.py."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from holodesk.control.pointer import Unreachable
from holodesk.control.pyautogui_executor import PyAutoGUIExecutor
from holodesk.core.geometry import InputPoint


class FakeReadback:
    """A fake pointer readback: returns ``positions`` in turn, then repeats the last one forever."""

    def __init__(self, positions: list[tuple[int, int]]) -> None:
        self._it: Iterator[tuple[int, int]] = iter(positions)
        self._last = positions[-1]
        self.reads = 0

    def __call__(self) -> tuple[int, int]:
        self.reads += 1
        self._last = next(self._it, self._last)
        return self._last


TARGET = InputPoint(700, 400)


def test_a_pointer_that_arrives_late_is_not_a_miss() -> None:
    """Held at its old position by a window manager for 20 readings (about 0.2 s), then it arrives."""
    readback = FakeReadback([(100, 100)] * 20 + [(700, 400)])
    ex = PyAutoGUIExecutor(pointer_readback=readback, settle_timeout_s=5.0)
    waited = ex.settle.check(TARGET, "target", before=(100, 100))
    assert 0.1 <= waited < 5.0 and readback.reads == 21


def test_a_pointer_at_rest_elsewhere_is_a_miss_without_waiting_for_the_timeout() -> None:
    readback = FakeReadback([(1919, 400)])  # clamped at the screen edge
    ex = PyAutoGUIExecutor(pointer_readback=readback, settle_timeout_s=30.0)
    t0 = time.monotonic()
    with pytest.raises(Unreachable, match=r"it is at \(1919, 400\)") as info:
        ex.settle.check(TARGET, "target", before=(100, 100))
    assert time.monotonic() - t0 < 5.0 and readback.reads == 3
    assert info.value.details["pointer_readback"] == [1919, 400]


def test_a_pointer_that_never_moves_is_a_miss_after_the_timeout() -> None:
    readback = FakeReadback([(100, 100)])
    ex = PyAutoGUIExecutor(pointer_readback=readback, settle_timeout_s=0.3)
    t0 = time.monotonic()
    with pytest.raises(Unreachable, match=r"after waiting 0\.3"):
        ex.settle.check(TARGET, "target", before=(100, 100))
    assert time.monotonic() - t0 >= 0.3


def test_tolerance_is_stated_and_exact_by_default() -> None:
    assert PyAutoGUIExecutor().settle.tolerance_px == 0
    with pytest.raises(Unreachable):
        PyAutoGUIExecutor(pointer_readback=FakeReadback([(701, 400)]), settle_timeout_s=1.0).settle.check(
            TARGET, "target", before=(0, 0))
    ex = PyAutoGUIExecutor(pointer_readback=FakeReadback([(701, 399)]), pointer_tolerance_px=1)
    assert ex.settle.check(TARGET, "target", before=(0, 0)) < 1.0
