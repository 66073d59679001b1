"""What a session reports and is bounded by: its states, the events its listeners receive, its limits, and how a
run ended (:class:`EpisodeResult`, with the reasons and ``stopped_by`` words). The loop itself is
:mod:`holodesk.session.loop`.
"""

from __future__ import annotations

import enum
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class State(enum.StrEnum):
    """States of a session."""

    IDLE = "idle"
    CAPTURING = "capturing"
    THINKING = "thinking"
    AWAITING_APPROVAL = "awaiting_approval"
    EXECUTING = "executing"
    FINISHED = "finished"
    FAILED = "failed"
    STOPPED = "stopped"

    @property
    def terminal(self) -> bool:
        return self in (State.FINISHED, State.FAILED, State.STOPPED)


@dataclass(frozen=True)
class SessionEvent:
    """Something listeners may show: a state change, a proposal, a result, a warning.

    Attributes:
        kind: "state" | "thought" | "proposal" | "decision" | "result" | "warning" | "error" | "end".
        state: the session state when the event was emitted.
        step: 0-based step number (-1 before the first step).
        message: plain-words text for the user.
        data: kind-specific payload: "thought" (a piece of the thought while the step is generated, in
            ``message``) -> ``text`` (the thought so far); "proposal" -> ``proposal``; "decision" -> ``response``
            and ``request`` (the ApprovalRequest decided, with its risk and headline); "result" -> ``result``;
            "end" -> ``result``.
    """

    kind: str
    state: State
    step: int
    message: str = ""
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SessionLimits:
    """Caps that end a run (field case F09) and the history bound (F21)."""

    max_steps: int = 30
    max_wall_s: float = 900.0
    max_parse_failures: int = 3
    max_repeats: int = 3
    monitor: int = 1


@dataclass
class EpisodeResult:
    """How a run ended.

    Attributes:
        status: final state (finished / failed / stopped).
        reason: plain-words reason.
        answer: the model's answer text for an ``answer`` action, else None.
        steps: number of steps taken: steps that asked the policy and wrote a step record (a rejected
            reply counts, a stop before the policy was asked does not).
        episode_path: the episode folder, when recorded.
        stopped_by: who or what stopped the run (:data:`STOPPED_BY_USER`, :data:`STOPPED_BY_FAILSAFE`,
            :data:`STOPPED_BY_WALL_CAP`, or the words given to
            :meth:`holodesk.session.loop.Session.request_stop`, e.g. "the MCP
            client (it cancelled the call)"); None when nothing stopped it (it finished, or failed by itself).
    """

    status: State
    reason: str
    answer: str | None = None
    steps: int = 0
    episode_path: Path | None = None
    stopped_by: str | None = None


Listener = Callable[[SessionEvent], None]

REASON_ANSWERED = "the model answered"
"""The reason of a run that ended with an ``answer`` action (its text is ``EpisodeResult.answer``)."""
FAILSAFE_STOP_REASON = "stopped: the pointer was moved to a screen corner (the fail-safe); the run has ended"
"""The reason of a run that the executor's fail-safe ended (its result has ``details["failsafe"]``)."""
STOPPED_BY_USER = "user"
"""``stopped_by`` of a stop the user asked for (the overlay's Esc, tray or hotkey Stop, Ctrl+C)."""
STOPPED_BY_NO_INPUT = "the end of the terminal's input"
"""``stopped_by`` of a run whose terminal approval prompt read no answer (stdin closed or empty: nobody to ask)."""
STOPPED_BY_FAILSAFE = "the fail-safe"
"""``stopped_by`` of a run that the pointer in a fail-safe corner ended."""
STOPPED_BY_WALL_CAP = "the wall-time cap"
"""``stopped_by`` of a run that :attr:`SessionLimits.max_wall_s` ended (its status is FAILED)."""


def stopped_by_signal(signum: int) -> str:
    """``stopped_by`` of a run that a signal to the process ended: ``"a SIGTERM signal to Holodesk"``."""
    return f"a {signal.Signals(signum).name} signal to Holodesk"
