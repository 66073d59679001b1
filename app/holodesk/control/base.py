"""Executor interface and the result type that every executor returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from holodesk.core.geometry import PlacedAction


@dataclass(frozen=True)
class ActionResult:
    """Outcome of performing one action, as data (errors are results, not crashes).

    Attributes:
        ok: True when the action was performed (and verified where verification is possible).
        status: "performed" | "failed" | "stopped_by_user" | "unknown" (the executor raised: the action
            may have been performed in part; set by the session, never by an executor).
        message: plain-words detail ("clicked at (960, 540)", "pointer clamped at (0, 0)").
        details: structured details for the episode record (input points, paste method, ...).
        duration_ms: wall time spent performing it.
        verified: False when the action was sent but its effect could not be checked (a clipboard
            paste: F15); the session then tells the user and the model instead of assuming success.
            None when no such doubt applies.
    """

    ok: bool
    status: str
    message: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    duration_ms: float = 0.0
    verified: bool | None = None


class Executor(Protocol):
    """Performs actions at the input points they were placed at (:func:`holodesk.core.geometry.place`,
    once per step, the points the approval showed); an executor never maps a point again.

    An executor that keeps state between the steps of an episode (the X11 typer's keyboard bindings)
    also has ``end_episode() -> None``, which the session calls once when an episode ends, whatever its
    outcome; it must not raise."""

    name: str

    def execute(self, placed: PlacedAction) -> ActionResult: ...
