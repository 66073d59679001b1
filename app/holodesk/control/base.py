"""Executor interface and the result type that every executor returns."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from holodesk.core.actions import Action, Click, handler_for
from holodesk.core.geometry import InputPoint, PlacedAction
from holodesk.errors import ActionError


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


@dataclass(frozen=True)
class Capability:
    """One thing an executor can do beyond ``execute``.

    Attributes:
        available: True when the executor has it (and the method that does it).
        how: plain words: how it is done, or why it cannot be and what stands in for it.
    """

    available: bool
    how: str

    def __str__(self) -> str:
        return f"{'yes' if self.available else 'no'}: {self.how}"


@dataclass(frozen=True)
class ExecutorCapabilities:
    """What an executor declares it can do beyond ``execute``; the session calls the matching method when
    it is available, and ``holodesk doctor`` shows every entry, so a missing one is never silent.

    Attributes:
        geometry_check: the start-up self-check ``check_geometry(monitor)`` (F28): raises
            :class:`~holodesk.errors.GeometryMismatch` when capture and input disagree on the monitor.
        failsafe_corners: a pointer pushed into a screen corner stops the run, and
            ``move_pointer_out_of_corner()`` moves a pointer resting there away before the first action (F12).
        episode_end: ``end_episode()`` undoes what the executor keeps between the steps of an episode.
        desktop_end: ``watch_desktop(stop)``: the desktop going away (compositor or X server) stops the running
            task at once, and later actions fail with "the desktop session ended".
        own_windows: an action aimed at one of Holodesk's own windows (the overlay, the no-tray window) is
            refused (:func:`holodesk.control.window.refuse_holodesk_target`).
    """

    geometry_check: Capability
    failsafe_corners: Capability
    episode_end: Capability
    desktop_end: Capability
    own_windows: Capability

    def to_dict(self) -> dict[str, str]:
        """``{"geometry check": "yes: ...", ...}`` for ``holodesk doctor``."""
        return {"geometry check": str(self.geometry_check), "fail-safe corners": str(self.failsafe_corners),
                "end of episode": str(self.episode_end), "desktop end": str(self.desktop_end),
                "own windows refused": str(self.own_windows)}


def click_result(action: Click, at: InputPoint) -> str:
    """What an executor did for a performed click, in words: ``"left-clicked at (960, 540)"``,
    ``"right-clicked at ..."``, ``"double-clicked at ..."``, ``"triple-clicked at ..."``."""
    done = f"{action.button}-clicked" if action.count == 1 else f"{action.verb}ed"
    return f"{done} at ({at.x}, {at.y})"


Handler = TypeVar("Handler")


def handler_of(executor: str, handlers: Mapping[type[Action], Handler], action: Action) -> Handler:
    """The entry of an executor's table (action class -> how it performs it) for the exact type of ``action``.

    Raises:
        ActionError: (field ``kind``) the table declares no such class (:func:`cannot_perform`).
    """
    handler = handler_for(handlers, action)
    if handler is None:
        raise cannot_perform(executor, action)
    return handler


def cannot_perform(executor: str, action: Action) -> ActionError:
    """The error of an executor for an action class its table does not declare (nothing was done)."""
    return ActionError(f"the {executor} executor cannot perform the action {action.kind!r} "
                       f"({type(action).__name__}); nothing was done", field="kind",
                       hint="Use an action of holodesk.core.actions.ACTION_TYPES.")


class Executor(Protocol):
    """Performs actions at the input points they were placed at (:func:`holodesk.core.geometry.place`,
    once per step, the points the approval showed); an executor never maps a point again.

    An executor that keeps state between the steps of an episode (the X11 typer's keyboard bindings)
    also has ``end_episode() -> None``, which the session calls once when an episode ends, whatever its
    outcome; it must not raise. Executors declare these extras in a ``capabilities`` attribute
    (:class:`ExecutorCapabilities`)."""

    name: str

    def execute(self, placed: PlacedAction) -> ActionResult: ...
