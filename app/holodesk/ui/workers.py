"""Running a session off the GUI thread, and the hand-offs between that thread and the GUI.

* :class:`TaskRunner` runs one task at a time on a :class:`QThread`: it builds the session there
  (loading a model may take minutes; progress is re-emitted), runs it, and re-emits every
  :class:`~holodesk.session.loop.SessionEvent` as a Qt signal delivered on the GUI thread. Exceptions
  on the worker thread go out through :attr:`TaskRunner.failed` (the app turns them into notifications).
* :class:`GuiApprover` is the session's user approver and autopilot hook: called on the worker thread,
  it posts a :class:`PendingDecision` to the GUI thread and blocks until the overlay (or Stop) answers.
* :class:`WindowGuard` is the session's ``before_capture`` / ``after_capture`` pair: it hides
  Holodesk's on-screen windows on the GUI thread, waits until the X server has really unmapped them and
  the screen below has repainted, and shows them again after the grab (F13).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from PySide6.QtCore import QCoreApplication, QObject, QPoint, Qt, QThread, Signal, Slot
from PySide6.QtWidgets import QApplication, QWidget

from holodesk.errors import HolodeskError
from holodesk.session.approval import ApprovalRequest, ApprovalResponse, Decision
from holodesk.session.loop import Session, check_task
from holodesk.session.state import SessionEvent
from holodesk.ui import x11

log = logging.getLogger(__name__)

ProgressFn = Callable[[str, float | None], None]
"""``progress(message, fraction)``: fraction in [0, 1], or None when unknown."""

SessionFactory = Callable[[ProgressFn], Session]
"""Builds the session on the worker thread (may load a model; reports through ``progress``)."""

Hold = Callable[[], AbstractContextManager[Any]]
"""Something held for the whole of one task, from before its session is built until its run ends."""


def on_gui_thread() -> bool:
    """True when called on the thread that owns the QApplication."""
    app = QCoreApplication.instance()
    return app is not None and QThread.currentThread() is app.thread()


class PendingDecision:
    """One approval waiting for an answer; the first :meth:`resolve` wins (thread-safe).

    Attributes:
        request: what is being approved.
        kind: "user" (wait for an explicit decision) or "autopilot" (approve after the countdown).
    """

    def __init__(self, request: ApprovalRequest, kind: str) -> None:
        self.request = request
        self.kind = kind
        self._event = threading.Event()
        self._lock = threading.Lock()
        self.response: ApprovalResponse | None = None

    def resolve(self, response: ApprovalResponse) -> bool:
        """Answer the request; returns False when it was already answered."""
        with self._lock:
            if self.response is not None:
                return False
            self.response = response
        self._event.set()
        return True

    @property
    def resolved(self) -> bool:
        return self._event.is_set()

    def wait(self, stop: threading.Event, poll_s: float = 0.05) -> ApprovalResponse:
        """Block until answered; a set ``stop`` event answers STOP."""
        while not self._event.wait(poll_s):
            if stop.is_set():
                self.resolve(ApprovalResponse(Decision.STOP))
        assert self.response is not None
        return self.response


class GuiApprover(QObject):
    """User approver and autopilot hook for :class:`~holodesk.session.approval.ApprovalPolicy`.

    Both are called on the session's worker thread and block it until the GUI answers.

    Signals:
        requested(PendingDecision): delivered on the GUI thread; the receiver must eventually call
            ``pending.resolve(...)`` (the approval controller does).
    Args:
        stop: event that answers any pending request with STOP (tray Stop, stop hotkey).
        after_decision: called on the worker thread after each answer, before the action runs (the app
            hides the overlay there and waits until it is off the screen).
    """

    requested = Signal(object)

    def __init__(self, stop: threading.Event, after_decision: Callable[[], None] | None = None,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.stop = stop
        self.after_decision = after_decision
        self.current: PendingDecision | None = None

    def _ask(self, request: ApprovalRequest, kind: str) -> ApprovalResponse:
        if on_gui_thread():
            raise RuntimeError("the approver must not be called on the GUI thread (it would block it)")
        pending = PendingDecision(request, kind)
        self.current = pending
        self.requested.emit(pending)
        try:
            response = pending.wait(self.stop)
        finally:
            self.current = None
        if self.after_decision is not None:
            self.after_decision()
        return response

    def __call__(self, request: ApprovalRequest) -> ApprovalResponse:
        """The user approver: waits for an explicit decision."""
        return self._ask(request, "user")

    def autopilot(self, request: ApprovalRequest) -> ApprovalResponse:
        """The autopilot hook: the overlay counts down and approves unless Stop/Skip comes first."""
        return self._ask(request, "autopilot")


_NOT_RESTORED = frozenset({"QBalloonTip", "QMenu", "QTipLabel", "QComboBoxPrivateContainer"})
"""Top-level popups that a grab closes rather than hides and shows again."""

_NEVER_HIDDEN = frozenset({"QSystemTrayIconSys"})
"""Qt's X11 tray icon window, embedded in the desktop's tray: hiding it would take the icon away."""


class WindowGuard(QObject):
    """Hides Holodesk's top-level windows around each screen grab (F13).

    Every visible top-level widget of the process is hidden (registered windows first), so the overlay,
    the command box, the no-tray window, dialogs and notices never reach the model; a minimised one is
    left as it is, and the others come back where they were (not where the window manager would place a
    new window). ``before_capture``
    and ``after_capture`` are called on the worker thread. Hiding happens on the GUI
    thread (blocking queued call); then the worker polls the X server until every hidden window is
    unmapped (up to ``unmap_timeout_s``) and sleeps ``settle_s`` so that the windows below the overlay
    have repainted the area it covered (without a compositor they repaint on Expose, asynchronously).

    Args:
        settle_s: seconds to wait after the unmap before the grab.
        unmap_timeout_s: longest wait for the X server to report the unmap.
    """

    _hide_request = Signal()
    _show_request = Signal()
    _dismiss_request = Signal()

    def __init__(self, settle_s: float = 0.12, unmap_timeout_s: float = 1.0, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.settle_s = settle_s
        self.unmap_timeout_s = unmap_timeout_s
        self._windows: list[QWidget] = []
        self._hidden: list[QWidget] = []
        self._positions: dict[int, QPoint] = {}
        self._hidden_ids: list[int] = []
        self._shown_ids: list[int] = []
        self.hide_count = 0
        self._dismissing: QWidget | None = None
        self._dismiss_ids: list[int] = []
        self._hide_request.connect(self._hide, Qt.ConnectionType.BlockingQueuedConnection)
        self._dismiss_request.connect(self._dismiss, Qt.ConnectionType.BlockingQueuedConnection)
        self._show_request.connect(self._show, Qt.ConnectionType.BlockingQueuedConnection)

    def register(self, window: QWidget) -> None:
        """Hide ``window`` first during grabs and raise it again afterwards (the overlay, the palette);
        every other visible top-level window is hidden and shown again without being raised."""
        if window not in self._windows:
            self._windows.append(window)
            window.destroyed.connect(lambda _=None, w=window: self._forget(w))

    def _forget(self, window: QWidget) -> None:
        if window in self._windows:
            self._windows.remove(window)
        if window in self._hidden:
            self._hidden.remove(window)

    @staticmethod
    def _balloons() -> list[QWidget]:
        """Qt's own tray balloons (QBalloonTip, shown where the desktop has no notification service)."""
        return [w for w in QApplication.topLevelWidgets()
                if w.isVisible() and w.metaObject().className() == "QBalloonTip"]

    @Slot()
    def _hide(self) -> None:
        # Every visible top-level window of this process: the overlay and palette (registered), the no-tray
        # window, dialogs, progress, message boxes, balloons, menus. None of it is for the model's eyes.
        # A minimised window (the no-tray window during a task) is off the screen already: left as it is.
        visible = [w for w in self._windows if w.isVisible() and not w.isMinimized()]
        visible += [w for w in QApplication.topLevelWidgets() if w.isVisible() and not w.isMinimized()
                    and w not in visible and w.metaObject().className() not in _NEVER_HIDDEN]
        self._hidden_ids = [int(w.winId()) for w in visible]
        # Transient popups are closed for good: a balloon or an open menu is not shown again.
        self._hidden = [w for w in visible if w.metaObject().className() not in _NOT_RESTORED]
        # Where each window was (frame included): shown again there, not where the window manager would
        # place it anew (openbox shifted a framed window by its decorations at every show)
        self._positions = {id(w): w.pos() for w in self._hidden if w not in self._windows}
        for w in visible:
            w.hide()
        if visible:
            self.hide_count += 1
        QCoreApplication.processEvents()  # flush the unmap requests to the X server

    @Slot()
    def _show(self) -> None:
        hidden, self._hidden = self._hidden, []
        positions, self._positions = self._positions, {}
        self._shown_ids = [int(w.winId()) for w in hidden]
        for w in hidden:
            if id(w) in positions:
                w.move(positions[id(w)])
            w.show()
            if w in self._windows:
                w.raise_()

    def hide_windows(self) -> bool:
        """Hide every visible Holodesk window and wait until they are off the screen; they come back at
        the next :meth:`show_windows`.

        Safe from any thread (on the GUI thread it cannot wait for repaints and only hides).
        Returns:
            True when something was hidden.
        """
        if on_gui_thread():
            self._hide()
            return bool(self._hidden_ids)
        self._hide_request.emit()
        return self._wait_unmapped(list(self._hidden_ids))

    @Slot()
    def _dismiss(self) -> None:
        window = self._dismissing
        self._dismiss_ids = []
        if window is not None and window.isVisible():
            self._dismiss_ids = [int(window.winId())]
            window.hide()
            QCoreApplication.processEvents()

    def dismiss(self, window: QWidget | None) -> bool:
        """Hide ``window`` for good (the overlay after a decision) and, off the GUI thread, wait until the
        X server has unmapped it and the screen below has repainted. Other windows are not touched.

        Returns:
            True when the window was visible.
        """
        self._dismissing = window
        if on_gui_thread():
            self._dismiss()
            return bool(self._dismiss_ids)
        self._dismiss_request.emit()
        return self._wait_unmapped(list(self._dismiss_ids))

    def _wait_unmapped(self, ids: list[int]) -> bool:
        if not ids:
            return False
        deadline = time.monotonic() + self.unmap_timeout_s
        while time.monotonic() < deadline:
            states = [x11.window_viewable(i) for i in ids]
            # ... and the window manager has let go of them (Mutter under XWayland composites a window
            # until it has handled the unmap, which can come 0.1-0.3 s after the X server's).
            managed = [x11.window_managed(i) for i in ids]
            if not any(s is True for s in states) and not any(m is True for m in managed):
                break
            time.sleep(0.01)
        else:
            log.warning("the overlay was still mapped %.1f s after hiding it", self.unmap_timeout_s)
        time.sleep(self.settle_s)
        return True

    def show_windows(self) -> None:
        """Show again what :meth:`hide_windows` hid (any thread). Off the GUI thread, wait (at most
        ``unmap_timeout_s``) until the X server has mapped them again: the action that follows the grab must
        meet the screen as the user has it (a Holodesk window back over its target is then refused), not a
        window still on its way back."""
        if on_gui_thread():
            self._show()
            return
        self._show_request.emit()
        ids = list(self._shown_ids)
        deadline = time.monotonic() + self.unmap_timeout_s
        while ids and time.monotonic() < deadline:
            if all(x11.window_viewable(i) is not False for i in ids):
                return
            time.sleep(0.01)
        if ids:
            log.warning("a Holodesk window was not mapped again %.1f s after the grab", self.unmap_timeout_s)

    def before_capture(self) -> None:
        """Session hook: hide before the grab."""
        self.hide_windows()

    def after_capture(self) -> None:
        """Session hook: show again after the grab."""
        self.show_windows()


class _Job(QObject):
    """Lives on the worker thread; builds and runs one session."""

    done = Signal()

    def __init__(self, runner: TaskRunner, task: str, factory: SessionFactory, hold: Hold | None) -> None:
        super().__init__()
        self.runner = runner
        self.task = task
        self.factory = factory
        self.hold = hold

    @Slot()
    def run(self) -> None:
        runner = self.runner
        try:
            with self.hold() if self.hold is not None else contextlib.nullcontext():
                session = self.factory(lambda msg, frac: runner.progress.emit(msg, frac))
                runner.session = session
                session.subscribe(runner._on_event)
                if runner.stop_event.is_set():  # stopped while queued: the run records it and does nothing
                    session.request_stop(runner.stopped_by)
                try:
                    result = session.run(self.task)
                finally:
                    session.close()
            runner.finished.emit(result)
        except BaseException as exc:  # every worker exception reaches the user through `failed`
            if isinstance(exc, HolodeskError):  # an expected error (a model that cannot load): no traceback
                log.error("the task could not run: %s", exc)
            else:
                log.exception("the task could not run")
            runner.failed.emit(exc)
        finally:
            runner.session = None
            self.done.emit()


class TaskRunner(QObject):
    """Runs one task at a time on a worker :class:`QThread`.

    Signals (all delivered on the GUI thread):
        session_event(SessionEvent): every session event.
        state_changed(State): the session state after each "state" event.
        progress(str, object): building progress (message, fraction in [0, 1] or None).
        finished(EpisodeResult): the run ended (finished, stopped or failed as a result).
        failed(BaseException): building or running raised (e.g. ModelLoadError, SettingsError).
        running_changed(bool): a task started / the worker thread ended.
    Attributes:
        stop_event: set by :meth:`stop`; the approver answers STOP and the session stops.
    """

    session_event = Signal(object)
    state_changed = Signal(object)
    progress = Signal(str, object)
    finished = Signal(object)
    failed = Signal(object)
    running_changed = Signal(bool)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.stop_event = threading.Event()
        self.stopped_by = "user"
        self.session: Session | None = None
        self.stop_hooks: list[Callable[[], None]] = []
        self._thread: QThread | None = None
        self._job: _Job | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None

    def _on_event(self, event: SessionEvent) -> None:
        # Worker thread: a stop asked before the loop cleared its flag must still stop it.
        if self.stop_event.is_set() and self.session is not None and not self.session.stop_requested:
            self.session.request_stop(self.stopped_by)
        self.session_event.emit(event)
        if event.kind == "state":
            self.state_changed.emit(event.state)

    def start(self, task: str, factory: SessionFactory, hold: Hold | None = None) -> None:
        """Start ``task`` on a new worker thread. ``hold()`` is entered on that thread before the session
        is built and left when the run ends (the app takes the desktop's drive lock there); what it
        raises ends the task through ``failed``.

        Raises:
            RuntimeError: a task is already running.
            TaskError: the task is empty (a ValueError too).
        """
        if self.running:
            raise RuntimeError("a task is already running; stop it first")
        task = check_task(task)
        self.stop_event.clear()
        self.stopped_by = "user"
        thread = QThread()
        thread.setObjectName("holodesk-session")
        job = _Job(self, task, factory, hold)
        job.moveToThread(thread)
        thread.started.connect(job.run)
        job.done.connect(thread.quit)
        thread.finished.connect(self._cleanup)
        self._thread, self._job = thread, job
        thread.start()
        self.running_changed.emit(True)

    @Slot()
    def _cleanup(self) -> None:
        thread, self._thread, self._job = self._thread, None, None
        if thread is not None:
            thread.wait()
            thread.deleteLater()
        self.running_changed.emit(False)

    def stop(self, by: str = "user") -> None:
        """Stop the running task at once (any thread): pending approvals answer STOP, the session stops
        at its next state boundary, stop hooks (the executor's stop event) run. ``by`` says who stopped
        it ("user", "the MCP client"; the first one while the task stops); the episode records it.

        Raises:
            TypeError: ``by`` is not a non-empty string (e.g. a Qt signal's ``checked`` flag).
        """
        if not isinstance(by, str) or not by.strip():
            raise TypeError(f"stop(by=...) takes who stopped the task in words, not {by!r}")
        if not self.stop_event.is_set():
            self.stopped_by = by
        session = self.session
        if session is not None:
            session.request_stop(self.stopped_by)
        self.stop_event.set()
        for hook in list(self.stop_hooks):
            try:
                hook()
            except Exception:  # a broken hook must not keep the session running
                log.exception("stop hook failed")

    def wait(self, timeout_s: float = 10.0) -> bool:
        """Wait (processing events) until no task runs; True when it ended in time."""
        deadline = time.monotonic() + timeout_s
        while self.running and time.monotonic() < deadline:
            QCoreApplication.processEvents()
            time.sleep(0.01)
        return not self.running

    def current_session(self) -> Any:
        return self.session
