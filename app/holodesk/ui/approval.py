"""The approval controller: turns a pending approval into an overlay and the user's keys into a decision.

Flow for one step (GUI thread unless noted):

1. :class:`~holodesk.ui.workers.GuiApprover` (worker thread) posts a
   :class:`~holodesk.ui.workers.PendingDecision`; :meth:`ApprovalController.present` opens an
   :class:`~holodesk.ui.overlay.OverlayWindow` on the screen of the frame's monitor, marking
   ``request.input_points`` (input space).
2. Enter approves, S skips, Esc stops, E edits. Editing a pointer action waits for a click (two for a
   drag: start, then end); the clicked input-space point becomes a model-space point through
   :func:`holodesk.core.geometry.input_to_point` with the request's frame, and the edited action is
   shown for a second look (Enter runs it as an EDIT decision). Editing a typing action makes its text
   editable (Ctrl+Enter keeps it).
3. In autopilot a countdown of ``countdown_s`` runs on the card; at zero the autopilot approves.
   Stop / Skip / Esc / Edit still work during it (Edit turns it into a normal decision).
4. The decision resolves the pending request; :meth:`after_decision` (worker thread) then hides the
   overlay, waits until the X server has unmapped it, and gives keyboard focus back to the window that
   had it, before the action runs.

Before step 1, while the step is proposed, the model's thought grows on a thinking panel
(:meth:`ApprovalController.session_event`), hidden when the proposal comes.
"""

from __future__ import annotations

import dataclasses
import logging
import time

from PySide6.QtCore import QObject, QPointF, QTimer, Signal, Slot
from PySide6.QtGui import QCursor

from holodesk.core.actions import Action, Drag, Point, Type
from holodesk.core.geometry import input_to_point, place
from holodesk.core.text import display_safe
from holodesk.core.wording import step_words
from holodesk.errors import ActionError
from holodesk.session.approval import ApprovalResponse, Decision
from holodesk.session.state import SessionEvent, State
from holodesk.ui import x11
from holodesk.ui.overlay import MARKER_COLOR, OverlayGeometry, OverlayWindow, ThinkingPanel, screen_for_monitor
from holodesk.ui.widgets import bring_to_front
from holodesk.ui.workers import PendingDecision, WindowGuard

log = logging.getLogger(__name__)


def replace_points(action: Action, points: list[Point]) -> Action:
    """A copy of ``action`` with its points replaced, in :meth:`Action.points` order, and its ``element``
    cleared (the model's words named the old target, not the one the user picked).

    Raises:
        ActionError: when the number of points does not match the action.
    """
    if isinstance(action, Drag):
        if len(points) != 2:
            raise ActionError(f"a drag needs 2 points, got {len(points)}")
        return dataclasses.replace(action, start=points[0], end=points[1], element=None)
    if len(points) != 1 or not hasattr(action, "point"):
        raise ActionError(f"{action.kind} cannot take {len(points)} new point(s)")
    return dataclasses.replace(action, point=points[0], element=None)  # type: ignore[call-arg]


class ApprovalController(QObject):
    """Shows one overlay per pending approval and resolves it with the user's (or autopilot's) decision.

    Signals:
        overlay_shown(OverlayWindow): an overlay is on screen (tests and the screenshot script use it).
        decided(object): the ApprovalResponse just given.
        pause_requested(): P was pressed during an autopilot countdown (the app pauses the autopilot; this
            step then waits for an explicit decision).
        failed(BaseException): the overlay could not be shown; the step was answered STOP (never left
            waiting, never approved).
    Args:
        guard: the window guard; overlays are registered so screen grabs never contain them (F13).
        countdown_s: autopilot countdown in seconds.
        marker_color: colour of the marks.
    """

    overlay_shown = Signal(object)
    decided = Signal(object)
    pause_requested = Signal()
    failed = Signal(object)

    def __init__(self, guard: WindowGuard, countdown_s: float = 2.0, marker_color: str = MARKER_COLOR,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.guard = guard
        self.countdown_s = countdown_s
        self.marker_color = marker_color
        self.overlay: OverlayWindow | None = None
        self.pending: PendingDecision | None = None
        self.edited: Action | None = None
        self._picked: list[tuple[int, int]] = []
        self._countdown_started: float | None = None
        self._previous_focus: int | None = None
        self.thinking: ThinkingPanel | None = None
        self._timer = QTimer(self)
        self._timer.setInterval(50)
        self._timer.timeout.connect(self._tick)

    # -- presenting -------------------------------------------------------------------------------
    @Slot(object)
    def present(self, pending: PendingDecision) -> None:
        """Open the overlay for ``pending`` (connected to ``GuiApprover.requested``).

        If the overlay cannot be shown the request is answered STOP and :attr:`failed` is emitted.
        """
        try:
            self._present(pending)
        except Exception as exc:  # shown to the user by the app; the run stops rather than hangs
            log.exception("the approval overlay could not be shown")
            self._timer.stop()
            self.pending = None
            self._close_overlay()
            pending.resolve(ApprovalResponse(Decision.STOP))
            self.failed.emit(exc)

    def _present(self, pending: PendingDecision) -> None:
        self._close_overlay()
        if pending.resolved:  # stopped before the GUI got to it
            return
        self.pending = pending
        self.edited = None
        self._picked = []
        request = pending.request
        frame = request.frame
        screen = screen_for_monitor(frame.monitor)
        geometry = OverlayGeometry(frame.monitor, screen.geometry())
        overlay = OverlayWindow(geometry, self.marker_color)
        self.overlay = overlay
        self.guard.register(overlay)
        card = overlay.card
        who = "Autopilot" if pending.kind == "autopilot" else "Approve this step?"
        card.title.setText(f"Step {request.step + 1} · {who}")
        card.set_words(display_safe(request.description), [display_safe(d) for d in request.details])
        thought = display_safe(request.proposal.thought)  # F24: controls, bidi, surrogates as escapes
        card.thought.setText(f"Model's thought: {thought}" if thought else "The model gave no thought.")
        card.set_risk(request.risk)
        action = request.action
        card.set_typed_text(action.text if isinstance(action, Type) else None)
        card.where.setText(f"On {frame.monitor.label}")
        card.where.setVisible(not request.input_points)  # the details name the monitor when it has points
        card.edit_hint.setVisible(False)
        caret = self._pointer_input(geometry) if isinstance(action, Type) else None
        window = request.window
        card.refine_button.setVisible(request.can_refine)
        overlay.show_action(action, request.input_points, caret_input=caret,
                            avoid_input=window.rect if window is not None else None)
        overlay.approve_pressed.connect(self.approve)
        overlay.skip_pressed.connect(lambda: self._finish(ApprovalResponse(Decision.SKIP)))
        overlay.stop_pressed.connect(lambda: self._finish(ApprovalResponse(Decision.STOP)))
        overlay.edit_pressed.connect(self.begin_edit)
        overlay.refine_pressed.connect(self.refine)
        overlay.point_picked.connect(self._point_picked)
        overlay.text_edited.connect(self._text_edited)
        overlay.edit_cancelled.connect(self._edit_cancelled)
        overlay.pause_pressed.connect(self._pause_pressed)
        self._previous_focus = x11.input_focus()
        if pending.kind == "autopilot":
            self._countdown_started = time.monotonic()
            card.set_countdown(self.countdown_s, self.countdown_s)
            self._timer.start()
        else:
            self._countdown_started = None
            card.set_countdown(None)
        overlay.refresh()  # the card's content is complete now: size and place it
        bring_to_front(overlay)
        overlay.setFocus()
        self.overlay_shown.emit(overlay)
        if pending.kind == "autopilot" and self.countdown_s <= 0:
            self._finish(ApprovalResponse(Decision.APPROVE, by="autopilot"))

    @staticmethod
    def _pointer_input(geometry: OverlayGeometry) -> tuple[int, int] | None:
        """The pointer's position in input space when it is on the overlay's monitor."""
        pos = QCursor.pos() - geometry.screen_rect.topLeft()
        if not (0 <= pos.x() < geometry.screen_rect.width() and 0 <= pos.y() < geometry.screen_rect.height()):
            return None
        return geometry.to_input(QPointF(pos))

    # -- the thought while the step is proposed ------------------------------------------------------
    @Slot(object)
    def session_event(self, event: SessionEvent) -> None:
        """Follow the session (connected to ``TaskRunner.session_event``, GUI thread): a ``"thought"`` event shows
        the thought so far on the thinking panel (:class:`~holodesk.ui.overlay.ThinkingPanel`); the proposal,
        the end of the run or any state but thinking hides it."""
        if event.kind == "thought":
            if self.thinking is None:
                self.thinking = ThinkingPanel()
            self.thinking.show_thought(event.step, display_safe(str(event.data.get("text", ""))))
        elif self.thinking is not None and (event.kind in ("proposal", "end")
                                            or (event.kind == "state" and event.state is not State.THINKING)):
            self.thinking.hide()

    # -- decisions --------------------------------------------------------------------------------
    @Slot()
    def approve(self) -> None:
        """Approve (or run the edited action) — Enter."""
        if self.edited is not None:
            self._finish(ApprovalResponse(Decision.EDIT, action=self.edited))
        else:
            self._finish(ApprovalResponse(Decision.APPROVE))

    def skip(self) -> None:
        self._finish(ApprovalResponse(Decision.SKIP))

    @Slot()
    def refine(self) -> None:
        """"Click more precisely": the session asks the model for the target's point in a close-up and shows the
        step again (only offered while the step is not edited)."""
        if self.edited is None and self.pending is not None and self.pending.request.can_refine:
            self._finish(ApprovalResponse(Decision.REFINE))

    def stop(self) -> None:
        """Answer STOP to the pending request, if any (tray Stop, stop hotkey)."""
        self._finish(ApprovalResponse(Decision.STOP))

    def _finish(self, response: ApprovalResponse) -> None:
        self._timer.stop()
        pending = self.pending
        if pending is None:
            return
        self.pending = None
        if self.overlay is not None:
            self.overlay.releaseMouse()
            self.overlay.set_mode("review")
        if pending.resolve(response):
            self.decided.emit(response)

    def _tick(self) -> None:
        pending = self.pending
        if pending is None or pending.resolved or self._countdown_started is None or self.overlay is None:
            self._timer.stop()
            return
        remaining = self.countdown_s - (time.monotonic() - self._countdown_started)
        if remaining <= 0:
            self.overlay.card.set_countdown(0.0, self.countdown_s)
            self._finish(ApprovalResponse(Decision.APPROVE, by="autopilot"))
        else:
            self.overlay.card.set_countdown(remaining, self.countdown_s)

    def _pause_pressed(self) -> None:
        if self._countdown_started is None:
            return
        self._cancel_countdown()
        if self.overlay is not None:
            self.overlay.card.edit_hint.setText("Autopilot paused: this and later steps wait for you. "
                                                "Resume it from the tray menu or the Holodesk window.")
            self.overlay.card.edit_hint.show()
            self.overlay.refresh()
        self.pause_requested.emit()

    def _cancel_countdown(self) -> None:
        if self._countdown_started is not None:
            self._timer.stop()
            self._countdown_started = None
            if self.overlay is not None:
                self.overlay.card.set_countdown(None)
                self.overlay.card.title.setText(self.overlay.card.title.text().replace("Autopilot",
                                                                                       "Approve this step?"))
                self.overlay.refresh()

    # -- editing ----------------------------------------------------------------------------------
    @Slot()
    def begin_edit(self) -> None:
        """E: start editing the proposed (or already edited) action."""
        overlay, pending = self.overlay, self.pending
        if overlay is None or pending is None:
            return
        self._cancel_countdown()
        action = self.edited or pending.request.action
        self._picked = []
        if isinstance(action, Type):
            overlay.card.set_typed_text(action.text, editable=True)
            overlay.set_mode("text", "Change the text, then Ctrl+Enter to keep it; Esc cancels.")
        elif action.points():
            what = "the new drag start" if isinstance(action, Drag) else "the new target"
            overlay.set_mode("pick", f"Click {what} anywhere on this monitor; Esc cancels.")
        else:
            overlay.set_mode("review", "This action has no target or text to edit.")

    def _point_picked(self, ix: int, iy: int) -> None:
        overlay, pending = self.overlay, self.pending
        if overlay is None or pending is None:
            return
        request = pending.request
        action = self.edited or request.action
        self._picked.append((ix, iy))
        needed = len(action.points())
        if len(self._picked) < needed:
            overlay.set_mode("pick", "Now click the new drag end; Esc cancels.")
            return
        try:
            points = [input_to_point(request.frame, x, y) for x, y in self._picked]
            edited = replace_points(action, points)
        except ActionError as exc:
            self._picked = []
            overlay.set_mode("pick", f"{exc.message}. Click again; Esc cancels.")
            return
        self._picked = []
        self._show_edited(edited)

    def _text_edited(self, text: str) -> None:
        overlay, pending = self.overlay, self.pending
        if overlay is None or pending is None:
            return
        try:
            edited: Action = Type(text)
        except ActionError as exc:
            overlay.set_mode("text", f"{exc.message}. Change the text, Ctrl+Enter keeps it; Esc cancels.")
            return
        overlay.card.set_typed_text(text, editable=False)
        self._show_edited(edited)

    def _show_edited(self, edited: Action) -> None:
        overlay, pending = self.overlay, self.pending
        assert overlay is not None and pending is not None
        self.edited = edited
        request = pending.request
        frame = request.frame
        points = list(place(edited, frame).input_points)  # what the session places and performs once approved
        # a new target may lie in another window: only typing keeps the window (and field) it had
        same_place = isinstance(edited, Type)
        window = request.window if same_place else None
        words = step_words(edited, window=window, focus_element=request.focus_element if same_place else None,
                           input_points=points, monitor_label=frame.monitor.label)
        overlay.card.set_words(f"Edited: {words.headline}", words.details)
        overlay.card.refine_button.setVisible(False)  # the model's target words no longer name the edited point
        overlay.show_action(edited, points, caret_input=None if points else self._pointer_input(overlay.geometry_map),
                            avoid_input=window.rect if window is not None else None)
        overlay.set_mode("review", "Edited. Enter runs the edited action; E edits again; Esc stops.")

    def _edit_cancelled(self) -> None:
        overlay, pending = self.overlay, self.pending
        if overlay is None or pending is None:
            return
        self._picked = []
        current = self.edited or pending.request.action
        if isinstance(current, Type):
            overlay.card.set_typed_text(current.text, editable=False)
        overlay.set_mode("review", "Edit cancelled." if self.edited is None else "Edited. Enter runs it.")

    # -- after the decision (worker thread) --------------------------------------------------------
    def after_decision(self) -> None:
        """Worker thread, after each decision: hide the overlay for good, wait until it is unmapped,
        and give keyboard focus back to the window that had it before the overlay opened."""
        self.guard.dismiss(self.overlay)
        previous = self._previous_focus
        if previous is not None:
            x11.set_input_focus(previous)

    def _close_overlay(self) -> None:
        overlay, self.overlay = self.overlay, None
        if overlay is not None:
            overlay.releaseMouse()
            overlay.hide()
            overlay.deleteLater()

    def close(self) -> None:
        """Stop any pending approval and remove the overlay."""
        self.stop()
        self._close_overlay()
