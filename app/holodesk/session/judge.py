"""Judging one step: what the desktop's probes say around a placed action (the focused window, the windows and
accessible elements under its points, another client's input grab), the risk the rules of
:mod:`holodesk.core.risk` give it, and the last look before its input lands (:func:`recheck`, issue 31).

The session (:class:`holodesk.session.loop.Session`) judges each step with its :class:`StepJudge`: with its probes
(:class:`Probes`) before the approval and again after the autopilot's countdown (:meth:`StepJudge.decide`), and at the
moment of input (:func:`recheck`, handed to the executor as ``before_input``: :meth:`StepJudge.before_input`). The
accessibility lookups of the judgements of one frame (the autopilot's, the card's and the record's, and the
autopilot's second look after its countdown) are made once (:class:`FrameElements`); :func:`recheck` always asks the
desktop afresh.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from holodesk.core.actions import Action, Move
from holodesk.core.element import Element, ElementProbe
from holodesk.core.geometry import Frame, PlacedAction
from holodesk.core.risk import Risk, RiskAssessment, assess
from holodesk.core.wording import WindowInfo
from holodesk.errors import HolodeskError
from holodesk.policy.base import Proposal
from holodesk.session.approval import ApprovalPolicy, ApprovalRequest, ApprovalResponse, Decision, make_request

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Probes:
    """The session's probes of the desktop (each None when the desktop has none; they are
    :class:`holodesk.session.loop.Session`'s arguments of the same names with ``_probe``).

    Attributes:
        focus: the focused window's class/title for the risk rules, or None when unknown.
        window: ``window(x, y)``: the window at an input-space point; ``window()``: the focused window
            (:class:`~holodesk.core.wording.WindowInfo` or None): the approval names it and keeps its card off
            it, and the risk rules judge pointer actions by the windows under their points (None: none known;
            the focused window decides).
        element: the accessible element under each of an action's points and the focused one
            (:class:`~holodesk.control.accessibility.AccessibilityProbe`); the risk rules judge by them and the
            record stores them (None: the model's words and the windows alone decide).
        grab: ``grab(windows)``: why input would not go where the approval says (another client holds the
            keyboard or pointer grab; a grab of the program that owns the window keys go to and ``windows``, the
            client windows' ids under the action's points, is its own menu:
            :class:`holodesk.control.grabs.GrabWatcher`, whose ``own_grab`` then says so), or None; asked when a
            step is judged (a grab makes it ask) and immediately before its input (:func:`recheck`).
    """

    focus: Callable[[], str | None] | None = None
    window: Callable[..., WindowInfo | None] | None = None
    element: ElementProbe | None = None
    grab: Callable[[Sequence[int | None]], str | None] | None = None


class FrameElements:
    """An element probe's answers for one frame: each lookup (the element at a point with a window rectangle,
    the focused element) is asked of ``probe`` once, and asked again it gives the first answer, with that
    lookup's :attr:`last_problem` and :attr:`last_ms` (the time the lookup took when it was made). Implements
    :class:`~holodesk.core.element.ElementProbe`.

    Args:
        probe: the desktop's element probe.
        frame: the frame the judged actions were proposed for (held weakly: :meth:`belongs_to`).
    """

    def __init__(self, probe: ElementProbe, frame: Frame) -> None:
        self.probe = probe
        self._frame = weakref.ref(frame)
        self._answers: dict[tuple[Any, ...], tuple[Element | None, str, float]] = {}
        self.last_problem = ""
        self.last_ms = 0.0

    def belongs_to(self, probe: ElementProbe, frame: Frame) -> bool:
        """True when these are ``probe``'s answers for ``frame``."""
        return self.probe is probe and self._frame() is frame

    def _answer(self, key: tuple[Any, ...], lookup: Callable[[], Element | None]) -> Element | None:
        if key not in self._answers:
            found = lookup()
            self._answers[key] = (found, self.probe.last_problem, self.probe.last_ms)
        found, self.last_problem, self.last_ms = self._answers[key]
        return found

    def element_at(self, x: int, y: int, window_rect: tuple[int, int, int, int] | None = None) -> Element | None:
        """The probe's element at ``(x, y)`` (screen pixels) for this frame."""
        return self._answer(("at", x, y, window_rect), lambda: self.probe.element_at(x, y, window_rect))

    def focused(self) -> Element | None:
        """The probe's focused element for this frame."""
        return self._answer(("focused",), self.probe.focused)


@dataclass(frozen=True)
class Judgement:
    """What the probes saw around one placed action and what the risk rules concluded.

    Attributes:
        focused: the focused window's class, None when unknown.
        pointer_windows: the application class under each of the action's points (None where unknown);
            None without a ``window_probe`` or without points.
        risk: the risk level and reason.
        window: the window the action acts in, for the approval's words: under its first point, else the
            focused one; None when unknown.
        elements: what the accessibility tree said (``element_probe``): ``at_points`` (the element under
            each point, or None), ``focused``, ``lookup_ms`` and ``problem``; None without a probe.
        element: the element the approval names: under the first point, else the focused one; None when
            unknown.
        grab: why input may not go where the card says (another client's input grab), or None.
        window_ids: the client windows' ids under the action's points (None where unknown), as the grab probe
            was given them.
    """

    focused: str | None
    pointer_windows: list[str | None] | None
    risk: RiskAssessment
    window: WindowInfo | None
    elements: dict[str, Any] | None = None
    element: Element | None = None
    grab: str | None = None
    window_ids: tuple[int | None, ...] = ()

    def to_record(self) -> dict[str, Any]:
        """The step record's fields from this judgement: ``risk`` (``level``, ``reason``), ``focused_window``,
        ``window`` (:meth:`WindowInfo.to_dict` or None), and ``pointer_windows`` and ``elements`` when known."""
        record: dict[str, Any] = {"risk": {"level": self.risk.level.value, "reason": self.risk.reason},
                                  "focused_window": self.focused,
                                  "window": self.window.to_dict() if self.window is not None else None}
        if self.pointer_windows is not None:
            record["pointer_windows"] = self.pointer_windows
        if self.elements is not None:
            record["elements"] = self.elements
        return record


def element_change(was: dict[str, Any], now: Element | None, what: str) -> str | None:
    """Why the element ``now`` is not the one recorded at approval (``was``: :meth:`Element.to_dict`), or
    None when role and name are the same."""
    if now is not None and (now.role, now.name) == (was["role"], was["name"]):
        return None
    shown = now.describe() if now is not None else "unknown"
    return f"the {what} changed since approval (was {Element(was['role'], was['name'], frozenset()).describe()}, " \
        f"now {shown})"


def judge(probes: Probes, placed: PlacedAction, selection: bool = False, held_keys: Sequence[str] = ()) -> Judgement:
    """Probe the windows and the accessible elements at the action's input points and classify the action
    (``selection``: a text selection may exist; ``held_keys``: the keys the executor holds down now)."""
    action = placed.action
    focused = probes.focus() if probes.focus else None
    if probes.window is None:
        ids: tuple[int | None, ...] = (None,) * len(placed.input_points)
        grab = probes.grab(ids) if probes.grab is not None and not action.ends_episode else None
        elements, at_points, focused_element = probe_elements(probes, placed, [None] * len(placed.input_points))
        return Judgement(focused, None, assess(action, focused_window=focused, pointer_elements=at_points,
                                                focused_element=focused_element, selection=selection,
                                                input_grab=grab, own_menu=_own_grab(probes), held_keys=held_keys),
                          None, elements, at_points[0] if at_points else focused_element, grab, ids)
    input_points = placed.input_points
    infos = [probe_window(probes, at) for at in input_points]
    ids = tuple(info.window_id if info is not None else None for info in infos)
    grab = probes.grab(ids) if probes.grab is not None and not action.ends_episode else None
    window = infos[0] if infos else probe_window(probes, None)
    pointer_windows = [info.app or None if info is not None else None for info in infos] if input_points else None
    on_frame = any(info is not None and info.on_frame(at.x, at.y)
                   for info, at in zip(infos, input_points, strict=True))
    elements, at_points, focused_element = probe_elements(probes, placed, infos)
    return Judgement(focused, pointer_windows, assess(action, focused_window=focused,
                                                       pointer_windows=pointer_windows,
                                                       on_window_frame=on_frame, pointer_elements=at_points,
                                                       focused_element=focused_element, selection=selection,
                                                       input_grab=grab, own_menu=_own_grab(probes),
                                                       held_keys=held_keys),
                      window, elements, at_points[0] if at_points else focused_element, grab, ids)


def _own_grab(probes: Probes) -> bool:
    """Whether the grab probe's last answer found the grabs held by the program the step acts in."""
    return bool(getattr(probes.grab, "own_grab", False))


def probe_elements(probes: Probes, placed: PlacedAction, infos: Sequence[WindowInfo | None]
                   ) -> tuple[dict[str, Any] | None, list[Element | None] | None, Element | None]:
    """Ask the element probe for the element under each input point (pointer actions) and the focused
    element (typing and keys); returns the record's ``elements`` entry, the elements at the points and
    the focused element (all None without a probe)."""
    probe = probes.element
    if probe is None:
        return None, None, None
    at_points: list[Element | None] | None = None
    focused: Element | None = None
    spent, problems = 0.0, []
    if placed.input_points:
        at_points = []
        for at, info in zip(placed.input_points, infos, strict=True):
            at_points.append(probe.element_at(at.x, at.y, info.client_rect if info is not None else None))
            spent += probe.last_ms
            problems.append(probe.last_problem)
    if placed.action.keyboard:
        focused = probe.focused()
        spent += probe.last_ms
        problems.append(probe.last_problem)
    record = {"at_points": [e.to_dict() if e is not None else None for e in at_points]
              if at_points is not None else None,
              "focused": focused.to_dict() if focused is not None else None,
              "lookup_ms": round(spent, 2), "problem": "; ".join(p for p in problems if p) or None}
    return record, at_points, focused

def probe_window(probes: Probes, at: Any) -> WindowInfo | None:
    """The window probe at input point ``at`` (None: the focused window); None when it fails."""
    assert probes.window is not None
    try:
        return probes.window(at.x, at.y) if at is not None else probes.window()
    except HolodeskError as exc:
        log.warning("could not identify the target window: %s", exc)
        return None


def recheck(probes: Probes, judged: Judgement, action: Action, points: tuple[Any, ...]) -> str | None:
    """The executor's last look before input lands (issue 31): why the action must not go ahead, or None.

    Asks the grab probe (another client's keyboard or pointer grab, when there was none at approval: an
    open menu's own grab, seen and asked about at approval, goes ahead); for typing and keys, whether the
    focused window (focus probe) and the focused element (element probe) are still those of the
    approval; for a pointer action, whether the window (window probe) and the element under the
    first point are. A probe that answered nothing at approval is not compared (nothing to compare)."""
    if isinstance(action, Move):
        return None
    if probes.grab is not None and judged.grab is None and (problem := probes.grab(judged.window_ids)) is not None:
        return f"{problem}, since approval"
    seen = judged.elements or {}
    if action.keyboard:
        if probes.focus is not None and judged.focused and (now := probes.focus()) != judged.focused:
            return f"the focused window changed since approval (was {judged.focused!r}, now {now!r})"
        if probes.element is not None and (was := seen.get("focused")) is not None:
            return element_change(was, probes.element.focused(), "focused element")
        return None
    if not points:
        return None
    if probes.window is not None and judged.window is not None:
        now_window = probe_window(probes, points[0])
        if now_window is None or (now_window.app, now_window.client_rect, now_window.window_id) != (
                judged.window.app, judged.window.client_rect, judged.window.window_id):
            return (f"the window under the pointer changed since approval (was {judged.window.name!r}, "
                    f"now {now_window.name if now_window is not None else 'unknown'!r})")
    if probes.element is not None and (was := (seen.get("at_points") or [None])[0]) is not None:
        rect = judged.window.client_rect if judged.window is not None else None
        return element_change(was, probes.element.element_at(points[0].x, points[0].y, rect),
                               "element under the pointer")
    return None


class StepJudge:
    """A session's judge of its steps: before the approval, again after the autopilot's countdown, and at the moment
    of input.

    Args:
        probes: the session's probes as set now (asked at each judgement: a probe may be set after the session is
            built).
        held_keys: the keys the executor holds down now (an earlier ``key_down`` of the run), for the risk rules
            and the card; empty for an executor that holds none.
    """

    def __init__(self, probes: Callable[[], Probes], held_keys: Callable[[], tuple[str, ...]]) -> None:
        self.probes = probes
        self.held_keys = held_keys
        self._frame_elements: FrameElements | None = None

    def probes_for(self, frame: Frame) -> Probes:
        """The probes a step proposed for ``frame`` is judged with: :attr:`probes`, the element lookups made once
        per frame (:class:`FrameElements`; the windows, the focus and the grab are asked each time, and the moment
        of input asks everything afresh)."""
        probes = self.probes()
        if probes.element is None:
            return probes
        if self._frame_elements is None or not self._frame_elements.belongs_to(probes.element, frame):
            self._frame_elements = FrameElements(probes.element, frame)
        return dataclasses.replace(probes, element=self._frame_elements)

    def decide(self, approval: ApprovalPolicy, step: int, proposal: Proposal, placed: PlacedAction, *,
               typed_into: str | None, can_refine: bool, selection: bool,
               record: dict[str, Any]) -> tuple[ApprovalRequest, ApprovalResponse, Judgement]:
        """``approval``'s answer for ``placed`` (step ``step`` of ``proposal``), with the request shown and the
        judgement behind it (``typed_into``: for typing, the focused field in words; ``can_refine``: see
        :attr:`~holodesk.session.approval.ApprovalRequest.can_refine`; ``selection``: a text selection may exist).
        An autopilot approval is judged again (the windows may have changed during its countdown: a terminal
        opened or took the focus); when the action is no longer low risk, ``record["risk_changed_during_countdown"]``
        is set and ``approval`` is asked again."""
        probes = self.probes_for(placed.frame)

        def ask(judged: Judgement) -> tuple[ApprovalRequest, ApprovalResponse]:
            request = make_request(step, proposal, placed, judged.risk, approval.mode, window=judged.window,
                                   focus_element=typed_into, element=judged.element, held_keys=self.held_keys(),
                                   can_refine=can_refine)
            return request, approval.decide(request)

        judged = judge(probes, placed, selection, self.held_keys())
        request, response = ask(judged)
        if response.by == "autopilot" and response.decision is Decision.APPROVE:
            judged = judge(probes, placed, selection, self.held_keys())
            if judged.risk.level is not Risk.LOW:
                record["risk_changed_during_countdown"] = True
                request, response = ask(judged)
        return request, response, judged

    def before_input(self, judged: Judgement) -> Callable[[Action, tuple[Any, ...]], str | None]:
        """The executor's last look before the input of the step approved on ``judged``: :func:`recheck` with the
        probes as set now."""
        return functools.partial(recheck, self.probes(), judged)
