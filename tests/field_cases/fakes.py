"""Fakes and small helpers for the field-case tests (shared/docs/field-cases.md).

Everything that stands in for hardware or a person is named ``Fake...`` / ``Spy...``:

* :class:`FakePanel` — one monitor as a scaled OS would present it: a physical panel (the pixels a
  screenshot has) shown at an OS scale factor, so its input-space (logical) size is the physical size
  divided by the scale, rounded. Xvfb cannot produce these (no Windows scaling, no Retina), so frames
  are synthesised with buttons drawn at known physical pixels.
* :func:`fake_input_cell` — the fake OS's side of a pointer move: the rectangle of physical frame
  pixels that one input-space unit covers on a scaled monitor (what a click at that input point hits).
* :class:`SpyApprover` — a user that answers approval requests from a script and records them.
* :class:`FakeFocusProbe` — reports a fixed focused-window class (e.g. a terminal) for risk checks.

The real parts are used everywhere else: :class:`holodesk.session.loop.Session`,
:class:`holodesk.policy.scripted.ScriptedPolicy` (which runs the real protocol parser), the real
geometry, and the real executor where a display exists.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from holodesk.capture.fake import FakeCapture
from holodesk.control.base import Executor
from holodesk.control.recording import RecordingExecutor
from holodesk.core.geometry import Frame, InputPoint, Monitor
from holodesk.policy.base import Observation, Proposal
from holodesk.policy.scripted import ScriptedPolicy
from holodesk.session.approval import ApprovalPolicy, ApprovalRequest, ApprovalResponse, Decision
from holodesk.session.loop import Session
from holodesk.session.state import SessionEvent, SessionLimits

BACKGROUND = (30, 30, 30)
BUTTON = (40, 160, 90)

Rect = tuple[int, int, int, int]
"""(x0, y0, x1, y1), x1/y1 exclusive."""


def reply(tool_call: dict[str, Any] | None, thought: str = "", note: str | None = None) -> str:
    """One holo-v1 reply as the model would send it (JSON text)."""
    return json.dumps({"note": note, "thought": thought, "tool_call": tool_call}, ensure_ascii=False)


@dataclass(frozen=True)
class FakePanel:
    """A fake monitor of a scaled desktop.

    Attributes:
        physical: panel size in physical pixels (the screenshot's size).
        scale: the OS scale factor (1.75 = 175 %); only used to derive the logical size, never read by
            the code under test.
        origin: the monitor's origin in input space (logical pixels).
        index: 1-based monitor number.
        name: output name.
    """

    physical: tuple[int, int]
    scale: float
    origin: tuple[int, int] = (0, 0)
    index: int = 1
    name: str = ""

    @property
    def logical(self) -> tuple[int, int]:
        """Input-space size: physical / scale, rounded (2880x1620 at 1.75 -> 1646x926)."""
        return round(self.physical[0] / self.scale), round(self.physical[1] / self.scale)

    def monitor(self) -> Monitor:
        """The monitor as the input API reports it (logical size, origin), physical size left unknown
        so that nothing but the frame's real size can give the ratio."""
        w, h = self.logical
        return Monitor(self.index, self.origin[0], self.origin[1], w, h, name=self.name or f"FAKE-{self.index}")

    def image(self, buttons: Iterable[Rect] = (), color: tuple[int, int, int] = BUTTON,
              background: tuple[int, int, int] = BACKGROUND) -> np.ndarray[Any, Any]:
        """A screenshot of this panel (physical pixels) with filled rectangles drawn on it."""
        w, h = self.physical
        img = np.empty((h, w, 3), np.uint8)
        img[:] = background
        for x0, y0, x1, y1 in buttons:
            img[y0:y1, x0:x1] = color
        return img

    def frame(self, buttons: Iterable[Rect] = ()) -> Frame:
        return Frame(self.image(buttons), self.monitor())


def button_around(center: tuple[int, int], size: tuple[int, int]) -> Rect:
    """The rectangle of a ``size`` (w, h) button centred on physical pixel ``center``."""
    (cx, cy), (w, h) = center, size
    return cx - w // 2, cy - h // 2, cx - w // 2 + w, cy - h // 2 + h


def fake_input_cell(frame: Frame, ip: InputPoint) -> tuple[float, float, float, float]:
    """The fake OS: the physical frame pixels covered by input-space unit ``ip`` on ``frame``'s monitor,
    as (x0, y0, x1, y1) with x1/y1 exclusive. The OS scales the logical unit by the true ratio of the
    panel to its logical size."""
    mon = frame.monitor
    sx, sy = frame.width / mon.width, frame.height / mon.height
    lx, ly = ip.x - mon.left, ip.y - mon.top
    return lx * sx, ly * sy, (lx + 1) * sx, (ly + 1) * sy


def cell_inside(cell: tuple[float, float, float, float], rect: Rect) -> bool:
    x0, y0, x1, y1 = cell
    return rect[0] <= x0 and x1 <= rect[2] and rect[1] <= y0 and y1 <= rect[3]


@dataclass
class SpyApprover:
    """A fake user at the approval prompt: answers from ``decisions`` (then ``default``) and records
    every request it was shown, in order."""

    decisions: list[ApprovalResponse] = field(default_factory=list)
    default: ApprovalResponse = field(default_factory=lambda: ApprovalResponse(Decision.APPROVE))
    requests: list[ApprovalRequest] = field(default_factory=list)

    def __call__(self, request: ApprovalRequest) -> ApprovalResponse:
        self.requests.append(request)
        return self.decisions.pop(0) if self.decisions else self.default


class FakeFocusProbe:
    """Reports a fixed WM_CLASS as the focused window (e.g. ``"xterm XTerm"``)."""

    def __init__(self, wm_class: str | None) -> None:
        self.wm_class = wm_class

    def __call__(self) -> str | None:
        return self.wm_class


class ActionsPolicy:
    """Fake policy: proposes ``actions`` in order, one a step, each with ``thought`` (for actions that the
    holo-v1 scripts :class:`ScriptedPolicy` reads cannot carry, e.g. an ``element``, or with real points)."""

    name = "actions (fake)"

    def __init__(self, actions: Sequence[Any], thought: str = "") -> None:
        self.actions = list(actions)
        self.thought = thought

    def propose(self, observation: Observation) -> Proposal:
        return Proposal(self.actions.pop(0), thought=self.thought)

    def close(self) -> None:
        return None


class SpyScriptedPolicy(ScriptedPolicy):
    """The real ScriptedPolicy, also recording each observation (task, frame, history) it was given."""

    def __init__(self, replies: Sequence[str | dict[str, Any]]) -> None:
        super().__init__(list(replies))
        self.observations: list[Observation] = []

    def propose(self, observation: Observation) -> Proposal:
        self.observations.append(observation)
        return super().propose(observation)


@dataclass
class Run:
    """A session wired from real parts, with everything it emitted."""

    session: Session
    policy: SpyScriptedPolicy
    capture: Any
    executor: Any
    approver: SpyApprover
    events: list[SessionEvent]

    def kinds(self, kind: str) -> list[SessionEvent]:
        return [e for e in self.events if e.kind == kind]


def make_run(
    replies: Sequence[str | dict[str, Any]],
    capture: Any,
    executor: Executor | None = None,
    *,
    mode: str = "step",
    approver: SpyApprover | None = None,
    limits: SessionLimits | None = None,
    **session_kw: Any,
) -> Run:
    """A real Session with a ScriptedPolicy (real parser) over ``replies`` (a SpyScriptedPolicy, which
    also keeps every observation it was given)."""
    policy = SpyScriptedPolicy(list(replies))
    spy = approver or SpyApprover()
    ex = executor if executor is not None else RecordingExecutor()
    session = Session(policy, capture, ex, ApprovalPolicy(mode, spy), limits or SessionLimits(), **session_kw)
    events: list[SessionEvent] = []
    session.subscribe(events.append)
    return Run(session, policy, capture, ex, spy, events)


class StaleLayoutCapture(FakeCapture):
    """A fake capture whose monitor list (what a run checks at its start) is the real current layout,
    while the frames it replays were captured under an older layout (``frame_monitor``): the monitor
    layout changed after the frame was grabbed (F06)."""

    def __init__(self, frame: Frame, current: Monitor) -> None:
        super().__init__({frame.monitor.index: [frame.pixels]}, [frame.monitor])
        self.current = current

    def monitors(self) -> list[Monitor]:
        return [self.current]


def single_frame_capture(frame: Frame) -> FakeCapture:
    """A FakeCapture showing ``frame``'s pixels on ``frame``'s monitor, for every grab."""
    return FakeCapture({frame.monitor.index: [frame.pixels]}, [frame.monitor])


class FakeUser32:
    """A fake of the Windows user32 DPI functions: the process starts ``initial`` (0 unaware, 1 system
    aware, 2 per-monitor) and, like Windows, accepts only the first awareness declaration."""

    def __init__(self, initial: int = 0, locked: bool = False) -> None:
        self.awareness = initial
        self.locked = locked  # True: something (e.g. pyautogui's SetProcessDPIAware) declared first
        self.calls: list[str] = []

    def SetProcessDpiAwarenessContext(self, ctx: Any) -> int:
        self.calls.append("SetProcessDpiAwarenessContext")
        if self.locked:
            return 0
        self.awareness, self.locked = 2, True
        return 1

    def GetThreadDpiAwarenessContext(self) -> int:
        return 1000 + self.awareness

    def GetAwarenessFromDpiAwarenessContext(self, ctx: int) -> int:
        return ctx - 1000


class FakeShcore:
    """A fake of shcore.SetProcessDpiAwareness that fails once awareness was declared (E_ACCESSDENIED)."""

    def __init__(self, user32: FakeUser32) -> None:
        self.user32 = user32

    def SetProcessDpiAwareness(self, value: int) -> int:
        if self.user32.locked:
            return -2147024891  # E_ACCESSDENIED as an HRESULT
        self.user32.awareness, self.user32.locked = value, True
        return 0
