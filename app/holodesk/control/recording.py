"""A fake executor that records what it was asked to do instead of touching the OS (unit tests)."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass

from holodesk.control.base import ActionResult
from holodesk.core.actions import Action
from holodesk.core.geometry import Frame, InputPoint, PlacedAction


@dataclass(frozen=True)
class RecordedAction:
    """One call to :meth:`RecordingExecutor.execute`.

    Attributes:
        action: the action as given.
        input_points: the input-space points it was placed at (``PlacedAction.input_points``), in order.
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

    It records the placed points as given, as the real executors use them. Thread-safe.

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

    def execute(self, placed: PlacedAction) -> ActionResult:
        """Record ``placed`` (action, input points, frame) and return an ok (or scripted) result."""
        action, frame, points = placed.action, placed.frame, placed.input_points
        with self._lock:
            number = len(self.calls)
            details = {"kind": action.kind, "monitor": frame.monitor.index,
                       "input_points": [[p.x, p.y] for p in points], "method": "recording"}
            result = self.scripted.get(number) or ActionResult(
                ok=True, status="performed", message=f"recorded {action.kind}", details=details)
            self.calls.append(RecordedAction(action=action, input_points=points, frame=frame, result=result))
            return result
