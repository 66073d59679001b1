"""Where the pointer really is after a move (F06, F22).

A window manager that holds a synchronous button grab freezes the pointer until it replays the previous click, so
a move can arrive a few hundred milliseconds after the request. :class:`PointerSettle` polls the pointer's
read-back until it is within ``tolerance_px`` of the target, or has come to rest somewhere else (three equal
readings away from where it started), or ``timeout_s`` has passed; only a pointer that really is elsewhere is a
miss (:class:`Unreachable`: clamped at a screen edge, moved away by another program, a changed monitor layout).

The fail-safe (F12): the pointer pushed into a corner of the screen or of any monitor (:func:`failsafe_points`)
stops the run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from holodesk.core.geometry import InputPoint


class Unreachable(Exception):
    """The pointer could not be placed where an action needs it (F06).

    Attributes:
        details: for the step record: ``target`` and, when read back, ``pointer_readback`` ``[x, y]`` and
            ``settle_wait_s``.
    """

    def __init__(self, message: str, details: dict[str, Any]) -> None:
        super().__init__(message)
        self.details = details


@dataclass
class PointerSettle:
    """Waits for the pointer to settle after a move and says whether it arrived.

    Attributes:
        read: the pointer's position now, ``(x, y)`` in input-space pixels.
        timeout_s: the longest wait, in seconds, for the pointer to arrive.
        tolerance_px: largest distance (per axis, input-space pixels) that still counts as arrived (0: X11
            reports the exact pixel it put the pointer on, so any difference is a real miss).
    """

    read: Callable[[], tuple[int, int]]
    timeout_s: float = 2.0
    tolerance_px: int = 0

    def arrived(self, position: tuple[int, int], target: InputPoint) -> bool:
        """Whether ``position`` is within :attr:`tolerance_px` of ``target`` on both axes."""
        tol = self.tolerance_px
        return abs(position[0] - target.x) <= tol and abs(position[1] - target.y) <= tol

    def settled(self, target: InputPoint, before: tuple[int, int] | None) -> tuple[tuple[int, int], float]:
        """Poll the pointer until it has arrived at ``target``, has come to rest elsewhere (three equal readings
        that differ from ``before``, its position before the move) or :attr:`timeout_s` has passed.

        Returns:
            (last position read, seconds waited).
        """
        t0 = time.monotonic()
        readings: list[tuple[int, int]] = []
        while True:
            x, y = self.read()
            position = (int(x), int(y))
            if self.arrived(position, target):
                return position, time.monotonic() - t0
            readings.append(position)
            at_rest_elsewhere = len(readings) >= 3 and len(set(readings[-3:])) == 1 and position != before
            waited = time.monotonic() - t0
            if at_rest_elsewhere or waited >= self.timeout_s:
                return position, waited
            time.sleep(0.01)

    def check(self, target: InputPoint, what: str, released_note: bool = False,
              before: tuple[int, int] | None = None) -> float:
        """Wait for the pointer to settle (:meth:`settled`; ``before`` is where it was before the move) and return
        the seconds waited, rounded to milliseconds.

        Raises:
            Unreachable: it settled elsewhere than ``target``; the message names ``what`` ("target", "drag end")
                and says the button was released there (``released_note``) or that nothing was clicked.
        """
        actual, waited = self.settled(target, before)
        if not self.arrived(actual, target):
            tail = "; the button was released there" if released_note else "; did not click"
            raise Unreachable(
                f"the pointer could not reach the {what} ({target.x}, {target.y}): it is at "
                f"({actual[0]}, {actual[1]}) after waiting {waited:.2f} s for it to settle (clamped at a "
                f"screen edge, moved away by another program, or the monitor layout changed since the "
                f"frame was captured){tail}",
                {"target": [target.x, target.y], "pointer_readback": [actual[0], actual[1]],
                 "settle_wait_s": round(waited, 3)},
            )
        return round(waited, 3)


def failsafe_points(screen: tuple[int, int], monitors: Sequence[tuple[int, int, int, int]]) -> list[tuple[int, int]]:
    """The fail-safe corners: the four corners of the whole screen (pyautogui's own) and of every monitor.

    A monitor's corners matter where the screen's are out of reach: on a second monitor, or where
    monitors of different sizes leave the screen's corner outside every monitor (X.Org keeps the pointer
    on the monitors).

    Args:
        screen: (width, height) of the whole screen, input-space pixels.
        monitors: ``(left, top, width, height)`` of each monitor, input-space pixels.
    Returns:
        Distinct ``(x, y)`` points, the screen's corners first.
    """
    width, height = screen
    rects = [(0, 0, width, height), *monitors]
    points: dict[tuple[int, int], None] = {}
    for left, top, w, h in rects:
        right, bottom = left + w - 1, top + h - 1
        for corner in ((left, top), (left, bottom), (right, top), (right, bottom)):
            points[corner] = None
    return list(points)
