"""Approval: the one place that decides whether a proposed action may run.

In step mode every action goes to the user's approver (terminal prompt, overlay). In autopilot low-risk
actions are approved by the autopilot and high-risk ones still go to the user (field case F11). The
loop refuses to execute anything without an :class:`ApprovalResponse` that approves it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from holodesk.core.actions import Action
from holodesk.core.approval import ApprovalMode, approval_mode
from holodesk.core.element import Element
from holodesk.core.geometry import Frame, InputPoint, PlacedAction
from holodesk.core.risk import Risk, RiskAssessment
from holodesk.core.wording import WindowInfo, step_words
from holodesk.policy.base import Proposal


class Decision(enum.StrEnum):
    """What the approver decided."""

    APPROVE = "approve"
    EDIT = "edit"
    SKIP = "skip"
    STOP = "stop"
    REFINE = "refine"
    """Ask the model again for the target's point in a crop around it ("Click more precisely"); the card is
    shown again with the refined point (:attr:`ApprovalRequest.can_refine`)."""


@dataclass(frozen=True)
class ApprovalRequest:
    """Everything an approver shows for one step.

    Attributes:
        step: 0-based step number.
        proposal: the policy's proposal (action, thought, raw text).
        frame: the frame the action was computed for (its monitor is where it will happen).
        description: the headline: what the step does to what, in plain words
            (:func:`holodesk.core.wording.step_words`), e.g. "Click ‘Cancel button’ in Demo form".
        input_points: where each of the action's points lands, in OS input space (from
            :func:`holodesk.core.geometry.place`): exactly where the executor performs it once approved.
        risk: risk level and reason.
        mode: who approves (step mode or autopilot).
        details: the headline's secondary lines (coordinates, window application, text length).
        window: the window the step acts in, when known (its rect keeps the approval card off it).
        focus_element: for typing, the field that has keyboard focus in words, when known.
        element: what the accessibility tree says is really there (the element under the first point,
            or for typing and keys the focused one), when known; :attr:`details` name it too.
        can_refine: the approver may answer :attr:`Decision.REFINE`: a one-point pointer action with the
            model's words for its target, and a policy that localizes elements.
    """

    step: int
    proposal: Proposal
    frame: Frame
    description: str
    input_points: tuple[InputPoint, ...]
    risk: RiskAssessment
    mode: ApprovalMode
    details: tuple[str, ...] = ()
    window: WindowInfo | None = None
    focus_element: str | None = None
    element: Element | None = None
    can_refine: bool = False

    @property
    def action(self) -> Action:
        return self.proposal.action


@dataclass(frozen=True)
class ApprovalResponse:
    """The approver's answer.

    Attributes:
        decision: approve / edit / skip / stop.
        action: for EDIT, the edited action that will run instead (validated); else None.
        by: who decided: "user" or "autopilot".
    """

    decision: Decision
    action: Action | None = None
    by: str = "user"

    def __post_init__(self) -> None:
        if self.decision is Decision.EDIT and self.action is None:
            raise ValueError("an EDIT response must carry the edited action")


Approver = Callable[[ApprovalRequest], ApprovalResponse]
"""A user-facing approver: blocks until the user decides (terminal prompt, overlay card)."""


def element_words(element: Element | None, input_points: Sequence[InputPoint]) -> str | None:
    """The line naming what the accessibility tree says is really there, as the approval card, the terminal prompt
    and the terminal's autopilot line say it: "Really there: push button ‘Delete all files’" for an action with
    input points (the element under the first), "Has the keyboard focus: text box ‘Name’" for typing and keys,
    with " (disabled)" after a disabled element; None when ``element`` is None (not known)."""
    if element is None:
        return None
    where = "Has the keyboard focus" if not input_points else "Really there"
    return f"{where}: {element.describe()}" + (" (disabled)" if element.disabled else "")


def make_request(step: int, proposal: Proposal, placed: PlacedAction, risk: RiskAssessment, mode: ApprovalMode, *,
                 window: WindowInfo | None = None, focus_element: str | None = None,
                 element: Element | None = None, held_keys: Sequence[str] = (),
                 can_refine: bool = False) -> ApprovalRequest:
    """Build the request shown to the approver for ``placed`` (the proposal's action placed on the frame it
    was computed on: its input points are shown, and performed once approved), worded with
    :func:`holodesk.core.wording.step_words` (``window``: where it acts, when known; ``focus_element``: for
    typing, the focused field in words; ``element``: the real element there, from the accessibility tree,
    named in a details line beside the model's words by :func:`element_words`;
    ``held_keys``: the keys an earlier ``key_down`` holds, named in a details line; ``can_refine``: see
    :attr:`ApprovalRequest.can_refine`)."""
    frame, points = placed.frame, placed.input_points
    words = step_words(placed.action, window=window, focus_element=focus_element, input_points=points,
                       monitor_label=frame.monitor.label, held_keys=held_keys)
    named = element_words(element, points)
    details = words.details if named is None else (*words.details, named)
    return ApprovalRequest(
        step=step,
        proposal=proposal,
        frame=frame,
        description=words.headline,
        input_points=points,
        risk=risk,
        mode=mode,
        details=details,
        window=window,
        focus_element=focus_element,
        element=element,
        can_refine=can_refine,
    )


class ApprovalPolicy:
    """Routes requests to the user or the autopilot.

    Args:
        mode: :attr:`ApprovalMode.STEP` (the user approves everything) or :attr:`ApprovalMode.AUTO` (the
            autopilot approves LOW risk only); its string value is accepted too.
        user: the user-facing approver.
        autopilot: optional hook called for auto-approved requests (e.g. the UI's visible countdown);
            it may return a response that overrides the approval (the user pressed Stop or Skip during
            the countdown). Without it LOW-risk requests are approved at once.
    """

    def __init__(self, mode: ApprovalMode | str, user: Approver, autopilot: Approver | None = None) -> None:
        self.mode = approval_mode(mode)
        self._user = user
        self._autopilot = autopilot
        self.paused = False

    def decide(self, request: ApprovalRequest) -> ApprovalResponse:
        """Return the decision for ``request``; HIGH risk and step mode always ask the user."""
        if self.mode is ApprovalMode.AUTO and not self.paused and request.risk.level is Risk.LOW:
            if self._autopilot is not None:
                return self._autopilot(request)
            return ApprovalResponse(Decision.APPROVE, by="autopilot")
        return self._user(request)
