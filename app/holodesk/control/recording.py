"""A fake executor that records what it was asked to do instead of touching the OS (unit tests)."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass

from holodesk.control.base import ActionResult
from holodesk.core.actions import Action
from holodesk.core.geometry import Frame, InputPoint, to_input_point
from holodesk.errors import HolodeskError


@dataclass(frozen=True)
class RecordedAction:
    """One call to :meth:`RecordingExecutor.execute`.

    Attributes:
        action: the action as given.
        input_points: its points mapped with ``to_input_point(frame, point)`` (input space), in order.
        frame: the frame it was proposed for.
        result: the result that was returned.
    """

    action: Action
    input_points: tuple[InputPoint, ...]
    frame: Frame
    result: ActionResult


class RecordingExecutor:
    """Fake :class:`~holodesk.control.base.Executor`: records calls and returns ok results.

    Args:
        scripted: results to return instead, keyed by 0-based call number (e.g. ``{2: ActionResult(
            ok=False, status="failed", message="boom")}``); calls not listed succeed.

    Points are converted exactly as the real executor does, so a bad point yields the same failed
    result. Thread-safe.

    Attributes:
        calls: every :class:`RecordedAction`, in call order.
    """

    name = "recording"

    def __init__(self, scripted: Mapping[int, ActionResult] | None = None) -> None:
        self.scripted = dict(scripted or {})
        self.calls: list[RecordedAction] = []
        self._lock = threading.Lock()

    def fail_at(self, call_number: int, message: str = "scripted failure", status: str = "failed") -> None:
        """Make call ``call_number`` (0-based) return ``ok=False`` with ``status`` and ``message``."""
        self.scripted[call_number] = ActionResult(ok=False, status=status, message=message,
                                                  details={"scripted": True})

    @property
    def actions(self) -> list[Action]:
        """The recorded actions, in call order."""
        return [c.action for c in self.calls]

    def execute(self, action: Action, frame: Frame) -> ActionResult:
        """Record ``action`` with its input points and return an ok (or scripted) result."""
        with self._lock:
            number = len(self.calls)
            points: tuple[InputPoint, ...] = ()
            try:
                points = tuple(to_input_point(frame, p) for p in action.points())
                details = {"kind": action.kind, "monitor": frame.monitor.index,
                           "input_points": [[p.x, p.y] for p in points], "method": "recording"}
                result = self.scripted.get(number) or ActionResult(
                    ok=True, status="performed", message=f"recorded {action.kind}", details=details)
            except HolodeskError as exc:
                result = ActionResult(ok=False, status="failed", message=str(exc),
                                      details={"kind": action.kind, "error": type(exc).__name__})
            self.calls.append(RecordedAction(action=action, input_points=points, frame=frame, result=result))
            return result
