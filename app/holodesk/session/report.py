"""A run told in plain words to a caller outside the app (the MCP server, the command channel).

:class:`StepReporter` listens to a :class:`~holodesk.session.loop.Session` and produces one JSON-ready
report per step: what the model proposed (plain words), what was decided and by whom, what happened.
:func:`outcome` is the JSON-ready end of a run. Both are plain dicts so that they cross a socket or an
MCP message unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from holodesk.core.wording import describe
from holodesk.session.approval import Decision
from holodesk.session.state import REASON_ANSWERED, EpisodeResult, SessionEvent, State

StepReport = dict[str, Any]
"""``{"step": int (1-based), "action": str, "decision": str, "result": str, "performed": bool}``."""

_DECIDED = {Decision.APPROVE: "approved", Decision.EDIT: "edited and approved", Decision.SKIP: "rejected (skipped)",
            Decision.STOP: "stopped"}


def decision_words(decision: Decision, by: str) -> str:
    """``"approved by the user"``, ``"approved by the autopilot"``, ``"rejected (skipped) by the user"``,
    ``"stopped by the wall-time cap"`` (``by`` other than "user" / "autopilot" is said as it is)."""
    who = {"autopilot": "the autopilot", "user": "the user"}.get(by, by)
    return f"{_DECIDED[decision]} by {who}"


class StepReporter:
    """Session listener that calls ``emit(report)`` once per step, when the step's outcome is known.

    A step whose reply was not a valid action is reported with ``action`` "(no valid action)" and the
    warning as its result. ``reports`` keeps every report of the run.
    """

    def __init__(self, emit: Callable[[StepReport], None]) -> None:
        self.emit = emit
        self.reports: list[StepReport] = []
        self._action: dict[int, str] = {}
        self._decision: dict[int, str] = {}

    def _send(self, step: int, result: str, performed: bool) -> None:
        report = {"step": step + 1, "action": self._action.get(step, "(no valid action)"),
                  "decision": self._decision.get(step, "none needed"), "result": result, "performed": performed}
        self.reports.append(report)
        self.emit(report)

    def __call__(self, event: SessionEvent) -> None:
        if event.kind == "proposal":
            self._action[event.step] = describe(event.data["proposal"].action)
        elif event.kind == "decision":
            response = event.data["response"]
            self._decision[event.step] = decision_words(response.decision, response.by)
            if response.decision is Decision.SKIP:
                self._send(event.step, "nothing was done", False)
            elif response.decision is Decision.STOP:
                self._send(event.step, "nothing was done; the task stops", False)
        elif event.kind == "result":
            result = event.data["result"]
            self._send(event.step, result.message or result.status, bool(result.ok))
        elif event.kind == "warning" and "raw_text" in event.data and event.step not in self._action:
            self._send(event.step, event.message, False)


def outcome(result: EpisodeResult, reports: list[StepReport] | None = None) -> dict[str, Any]:
    """The end of a run for a caller: ``status`` finished / answered / stopped / failed, ``reason``,
    ``answer`` (text or None), ``steps`` (count), ``episode_id`` (folder name or None), ``step_reports``."""
    status = result.status.value
    if result.status is State.FINISHED and result.reason == REASON_ANSWERED:
        status = "answered"
    return {"status": status, "reason": result.reason, "answer": result.answer, "steps": result.steps,
            "episode_id": result.episode_path.name if result.episode_path else None,
            "step_reports": list(reports or [])}
