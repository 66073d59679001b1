"""Commands from outside the GUI thread, carried out by the running app: open the command box, stop,
report the status, run a task for a caller (the MCP server) and tell it each step.

:class:`AppRemote` is the :class:`~holodesk.instance.ChannelServer` handler of the desktop app, and the
in-process entry point of ``holodesk mcp`` when no app runs; both reach the very same
:class:`~holodesk.ui.app.HolodeskApp` methods, so a task from a caller is approved exactly like a task
typed in the command box (same overlay, same autopilot, same recording).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Qt, Signal, Slot

from holodesk.core.approval import ApprovalMode, approval_mode
from holodesk.instance import ChannelError, Connection, DesktopBusy
from holodesk.session.report import StepReporter, outcome
from holodesk.session.state import EpisodeResult, State
from holodesk.ui.workers import on_gui_thread

if TYPE_CHECKING:  # for annotations only: holodesk.ui.app imports this module
    from holodesk.ui.app import HolodeskApp

log = logging.getLogger(__name__)

BUSY = "busy: another task is driving the desktop; try again when it has ended"
CLOSING = "Holodesk is quitting (it was told to end); the task was not started"
"""Why a task that arrives while the app shuts down does not start (:attr:`HolodeskApp.closing`)."""


def allowed_mode(requested: str | None, current: ApprovalMode, allowed: list[str]) -> ApprovalMode:
    """The approval mode a caller's task runs in: ``requested`` when the user allowed it, else (None) the
    app's current mode when allowed, else the first allowed one.

    Raises:
        ValueError: ``requested`` is not among ``allowed`` (the message names the allowed modes).
    """
    if requested is not None:
        if requested not in allowed:
            raise ValueError(f"mode {requested!r} is not allowed for callers; the user allows: "
                             f"{', '.join(allowed) or 'none'} (Settings: mcp_allowed_modes)")
        return approval_mode(requested)
    if current in allowed:
        return current
    if not allowed:
        raise ValueError("the user allows no approval mode for callers (Settings: mcp_allowed_modes)")
    return approval_mode(allowed[0])


class AppRemote(QObject):
    """Carries out channel requests on ``app`` (each call comes from a thread other than the GUI's).

    Args:
        app: the running desktop app.
    """

    _call = Signal(object)

    def __init__(self, app: HolodeskApp) -> None:
        super().__init__(app)
        self.app = app
        self._call.connect(self._run_call, Qt.ConnectionType.QueuedConnection)

    @Slot(object)
    def _run_call(self, job: Callable[[], None]) -> None:
        job()

    def on_gui(self, fn: Callable[[], Any], timeout_s: float = 30.0) -> Any:
        """Run ``fn`` on the GUI thread and return its value (its exception is raised here).

        Raises:
            ChannelError: the GUI thread did not run it within ``timeout_s``.
        """
        if on_gui_thread():
            return fn()
        done = threading.Event()
        box: dict[str, Any] = {}

        def job() -> None:
            try:
                box["value"] = fn()
            except BaseException as exc:  # re-raised on the caller's thread
                box["error"] = exc
            finally:
                done.set()

        self._call.emit(job)
        if not done.wait(timeout_s):
            raise ChannelError("the app's window thread did not answer in time")
        if "error" in box:
            raise box["error"]
        return box["value"]

    # -- the channel handler ---------------------------------------------------------------------------
    def handle(self, request: dict[str, Any], conn: Connection) -> None:
        """:class:`~holodesk.instance.ChannelServer` handler: answers one request on ``conn``."""
        command = request["command"]
        if command == "ping":
            conn.send({"ok": True, "pid": os.getpid()})
        elif command == "palette":
            conn.send({"ok": True, **self.on_gui(self._palette)})
        elif command == "stop":
            by = str(request.get("by") or "user")
            conn.send({"ok": True, "stopped": bool(self.on_gui(lambda: self._stop(by)))})
        elif command == "status":
            conn.send({"ok": True, **self.status()})
        elif command == "run_task":
            cancel = threading.Event()
            caller = str(request.get("by") or "the caller")
            stopper = {"by": f"{caller} (it disconnected)"}

            def watch() -> None:  # {"command": "stop", "by": ...} or the end of the stream cancels
                with contextlib.suppress(OSError, ChannelError):
                    while (message := conn.receive()) is not None:
                        if message.get("command") == "stop":
                            stopper["by"] = str(message.get("by") or caller)
                            break
                cancel.set()

            def send_step(report: dict[str, Any]) -> None:
                with contextlib.suppress(OSError):  # the caller is gone: the watcher stops the task
                    conn.send({"event": "step", **report})

            threading.Thread(target=watch, name="holodesk-channel-watch", daemon=True).start()
            reply = self.run_task(str(request.get("task") or ""), request.get("mode"), lambda: stopper["by"],
                                  send_step, cancel)
            with contextlib.suppress(OSError):
                conn.send(reply)

    def _palette(self) -> dict[str, Any]:
        if self.app.runner.running:
            return {"opened": False, "message": "a task is running; stop it first (`holodesk stop`)"}
        self.app.open_palette()
        return {"opened": True, "message": "opened the command box"}

    def _stop(self, by: str) -> bool:
        running = self.app.runner.running
        self.app.stop(by=by)
        return running

    def status(self) -> dict[str, Any]:
        """``running`` (bool), ``status`` (icon status), ``mode``, ``allowed_modes``, ``pid``."""
        def read() -> dict[str, Any]:
            return {"running": self.app.runner.running, "status": self.app.status.value,
                    "mode": self.app.approval_policy.mode,
                    "allowed_modes": self.app.settings.mcp_allowed_modes.split(","), "pid": os.getpid()}
        return dict(self.on_gui(read))

    # -- a caller's task -------------------------------------------------------------------------------
    def run_task(self, task: str, mode: str | None, by: Callable[[], str],
                 on_step: Callable[[dict[str, Any]], None], cancel: threading.Event) -> dict[str, Any]:
        """Run ``task`` in the app for a caller and block (off the GUI thread) until it ends.

        Args:
            task: the instruction.
            mode: an :class:`ApprovalMode` word, or None (see :func:`allowed_mode`).
            by: called when ``cancel`` is set: who stopped the task (recorded), e.g. "the MCP client (it
                cancelled the call)".
            on_step: gets each step's plain-words report (:class:`~holodesk.session.report.StepReporter`).
            cancel: set by the caller to stop the task (before its next action).
        Returns:
            ``{"ok": True, "outcome": {...}}`` (see :func:`~holodesk.session.report.outcome`), or
            ``{"ok": False, "error": TEXT, "busy": bool}`` when the task could not start.
        """
        call = _CallerTask(self.app, task, mode, StepReporter(on_step))
        refused = self.on_gui(call.start)
        if refused is not None:
            return dict(refused)
        stopped = False
        while not call.done.wait(0.05):
            if cancel.is_set() and not stopped:
                stopped = True
                who = by()
                log.info("%s stopped the task", who)
                self.on_gui(functools.partial(self.app.stop, by=who))
        self.on_gui(call.end)
        if call.refused is not None:
            return dict(call.refused)
        return {"ok": True, "outcome": call.outcome}


class _CallerTask:
    """One caller's task in the app: started and ended on the GUI thread (:meth:`start`, :meth:`end`),
    its end awaited on the caller's thread (:attr:`done`).

    Attributes:
        done: set when the task ended or could not run.
        outcome: the caller's :func:`~holodesk.session.report.outcome` once it ended.
        refused: the refusal when another process's task drives the desktop (``DesktopBusy``), else None.
    """

    def __init__(self, app: HolodeskApp, task: str, mode: str | None, reporter: StepReporter) -> None:
        self.app, self.task, self.mode, self.reporter = app, task, mode, reporter
        self.done = threading.Event()
        self.outcome: dict[str, Any] | None = None
        self.refused: dict[str, Any] | None = None
        self.previous_mode: ApprovalMode | None = None
        self.chosen_mode: ApprovalMode | None = None
        self.connected: tuple[tuple[Any, Callable[..., None]], ...] = ()

    def finished(self, result: EpisodeResult) -> None:
        self.outcome = outcome(result, self.reporter.reports)
        self.done.set()

    def failed(self, exc: BaseException) -> None:
        if isinstance(exc, DesktopBusy):  # another process's task drives the desktop
            self.refused = {"ok": False, "busy": True, "error": str(exc)}
        else:
            self.outcome = outcome(EpisodeResult(State.FAILED, f"the task could not run: {exc}"),
                                   self.reporter.reports)
        self.done.set()

    def start(self) -> dict[str, Any] | None:
        """GUI thread: start the task in the chosen mode; the refusal (``{"ok": False, ...}``) or None."""
        app = self.app
        if app.runner.running:
            return {"ok": False, "busy": True, "error": BUSY}
        if not self.task.strip():
            return {"ok": False, "busy": False, "error": "the task is empty: say what Holodesk should do"}
        try:
            chosen = allowed_mode(self.mode, app.approval_policy.mode, app.settings.mcp_allowed_modes.split(","))
        except ValueError as exc:
            return {"ok": False, "busy": False, "error": str(exc)}
        self.previous_mode, self.chosen_mode = app.approval_policy.mode, chosen
        if chosen != self.previous_mode:
            app.set_mode(chosen)
        app.palette.hide()
        app.notifier.info("A task from another program", f"{self.task}\nEvery step is approved as usual; Esc on the "
                          "overlay or the stop hotkey stops it.")
        slots: tuple[Callable[..., None], ...] = (self.reporter, self.finished, self.failed)
        self.connected = tuple(zip((app.runner.session_event, app.runner.finished, app.runner.failed), slots,
                                   strict=True))  # the very slot objects, to disconnect them
        for qt_signal, slot in self.connected:
            qt_signal.connect(slot)
        if not app.start_task(self.task):
            self.end()
            return {"ok": False, "busy": False, "error": CLOSING if app.closing else "the app could not start the task"}
        return None

    def end(self) -> None:
        """GUI thread: stop listening to the app and give back the mode the user had."""
        app = self.app
        for qt_signal, slot in self.connected:
            with contextlib.suppress(RuntimeError, TypeError):
                qt_signal.disconnect(slot)
        self.connected = ()
        if (self.previous_mode is not None and app.approval_policy.mode == self.chosen_mode
                and self.previous_mode != self.chosen_mode):
            app.set_mode(self.previous_mode)
