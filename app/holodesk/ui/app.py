"""The desktop app: wires tray (or fallback window), palette, hotkeys, overlay, settings and history to
one :class:`~holodesk.session.loop.Session` per task, run off the GUI thread.

The session layer never sees Qt. :class:`HolodeskApp` subscribes to it through
:class:`~holodesk.ui.workers.TaskRunner` (events re-emitted as signals on the GUI thread) and answers
approvals through :class:`~holodesk.ui.workers.GuiApprover`; every worker exception reaches the user
through :class:`~holodesk.ui.notify.Notifier`.
"""

from __future__ import annotations

import contextlib
import logging
import logging.handlers
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, MutableMapping
from pathlib import Path
from typing import Any

from PySide6.QtCore import QCoreApplication, QObject, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QAction, QDesktopServices, QGuiApplication
from PySide6.QtWidgets import QApplication, QFileDialog, QMessageBox, QProgressDialog, QSystemTrayIcon, QWidget

from holodesk.core.approval import ApprovalMode, approval_mode
from holodesk.download.hub import hub_token
from holodesk.download.manager import download_model
from holodesk.errors import HolodeskError, ModelLoadError, SettingsError
from holodesk.instance import ChannelError, ChannelServer, DriveLock, InstanceLock
from holodesk.machine import memory_bandwidth, probe_gpus
from holodesk.policy.models import DEFAULT_MODEL, find_model, get_model
from holodesk.policy.native.families import check_checkpoint_before_weights
from holodesk.policy.source import hub_repo
from holodesk.session.approval import ApprovalPolicy
from holodesk.session.factory import (
    PolicyCache,
    build_capture,
    build_executor,
    build_policy,
    build_session,
    default_focus_probe,
    default_window_probe,
)
from holodesk.session.loop import Session, check_task
from holodesk.session.state import EpisodeResult, SessionEvent, State, stopped_by_signal
from holodesk.settings import Settings, config_path, load_settings
from holodesk.ui import x11
from holodesk.ui.approval import ApprovalController
from holodesk.ui.download import DownloadFn
from holodesk.ui.history import HistoryWindow
from holodesk.ui.icons import Status, status_for_state
from holodesk.ui.notify import Notifier, install_exception_hooks
from holodesk.ui.overlay import MARKER_COLOR
from holodesk.ui.palette import CommandPalette, GlobalHotkeys, hotkey_label
from holodesk.ui.remote import CLOSING, AppRemote
from holodesk.ui.settings_dialog import SettingsDialog
from holodesk.ui.tray import AppActions, FallbackWindow, TrayIcon, app_icon
from holodesk.ui.widgets import bring_to_front
from holodesk.ui.wizard import MachineFacts, SetupWizard, gather_facts
from holodesk.ui.workers import GuiApprover, ProgressFn, TaskRunner, WindowGuard

log = logging.getLogger(__name__)

MINIMISE_TIMEOUT_S = 5.0
"""The longest wait, in seconds, for the window manager to minimise the no-tray window before a task (openbox on a
loaded 2-core machine took more than 2 s); the wait is paid once: where it runs out, the window is hidden for this
task and every later one (:meth:`HolodeskApp._window_out_of_the_way`)."""

PolicyFactory = Callable[[Settings, ProgressFn], Any]
CaptureFactory = Callable[[Settings], Any]
ExecutorFactory = Callable[[Settings, threading.Event], Any]


def hub_download(repo_id: str, *, revision: str, cache_dir: Path, progress: Callable[[Any], None],
                 cancel: threading.Event) -> Any:
    """The download dialog's :data:`~holodesk.ui.download.DownloadFn`: the download manager
    (:func:`holodesk.download.manager.download_model`) with the hub token kept in the keychain."""
    return download_model(repo_id, revision=revision, cache_dir=cache_dir, progress=progress, cancel=cancel,
                          token=hub_token(),
                          before_weights=lambda folder: check_checkpoint_before_weights(folder, hub_repo(repo_id)))


def _default_policy(settings: Settings, progress: ProgressFn, cancel: threading.Event | None = None) -> Any:
    """The settings' policy; ``cancel`` (the task's stop event) stops a hub download of the local model."""

    def report(*args: Any, **kwargs: Any) -> None:
        # The local runtime reports (message[, fraction]); anything else is shown as text.
        message = str(args[0]) if args else str(kwargs.get("message", "loading"))
        fraction = args[1] if len(args) > 1 and isinstance(args[1], int | float) else kwargs.get("fraction")
        progress(message, float(fraction) if isinstance(fraction, int | float) else None)

    progress(f"Loading the {settings.policy} policy ({settings.model})...", None)
    return build_policy(settings, progress=report, cancel=cancel)


class HolodeskApp(QObject):
    """The running desktop app.

    Args:
        settings: effective settings (``load_settings()``).
        force_window: show the small window even when a tray exists (``holodesk tray --no-tray``).
        hotkeys: listen for the global hotkeys (tests driving everything through Qt may turn it off).
        policy_factory / capture_factory / executor_factory: how the session's parts are built from the
            task's settings (``policy_factory(settings, progress)``, ``capture_factory(settings)``,
            ``executor_factory(settings, stop_event)``; default: :mod:`holodesk.session.factory`); called on
            the worker thread by :func:`holodesk.session.factory.build_session`.
        settings_path: file the settings dialog writes (default :func:`holodesk.settings.config_path`).
        marker_color: overlay mark colour.
        dialogs: show errors as message boxes when there is no tray (tests turn it off and read
            ``notifier.history``).
        download: the download manager's function, for the setup wizard's Download button (None: the
            wizard accepts checkpoint folders already on disk only).
        facts: how the setup wizard learns what this machine has (default :func:`gather_facts`).
        focus_probe: returns the focused window's class for the risk rules, None when unknown (default:
            :func:`holodesk.control.window.focused_window_class`).
        window_probe: the window at an input point, or the focused one without a point (default:
            :func:`holodesk.control.window.window_at`); the risk rules judge pointer actions by it.
        headless: neither tray icon nor window (``holodesk mcp`` hosting tasks while no app runs); the
            command box, overlay and autopilot countdown still show.
    Signals:
        status_changed(Status): the icon status changed.
        task_finished(EpisodeResult): a task ended.
    """

    status_changed = Signal(object)
    task_finished = Signal(object)

    def __init__(self, settings: Settings, *, force_window: bool = False, hotkeys: bool = True,
                 policy_factory: PolicyFactory | None = None, capture_factory: CaptureFactory | None = None,
                 executor_factory: ExecutorFactory | None = None, settings_path: Path | None = None,
                 marker_color: str = MARKER_COLOR, dialogs: bool = True, download: DownloadFn | None = None,
                 facts: Callable[[], MachineFacts] | None = None,
                 focus_probe: Callable[[], str | None] | None = None,
                 window_probe: Callable[..., Any] | None = None, headless: bool = False,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.closing = False  # set by shutdown(): no task starts any more (one queued when a signal came)
        self.focus_probe = focus_probe or default_focus_probe()
        self.window_probe = window_probe or default_window_probe()
        self.settings = settings
        self.settings_path = settings_path
        # Stop and Quit set the runner's stop event: it also ends a download of the local model at once
        self.policy_factory = policy_factory or (
            lambda s, progress: _default_policy(s, progress, cancel=self.runner.stop_event))
        self.capture_factory = capture_factory or build_capture
        self.executor_factory = executor_factory or build_executor
        self.policies = PolicyCache()
        self.last_result: EpisodeResult | None = None
        self.download = download
        self.facts = facts or gather_facts
        self._task_settings = settings
        self._last_task: tuple[str, Settings] | None = None

        self.notifier = Notifier(self)
        self.notifier.use_dialogs = dialogs
        self.notifier.set_remedy("settings", self.open_settings)
        self.notifier.set_remedy("wizard", self.open_wizard)
        self.notifier.set_remedy("retry", self.retry)
        self.actions = AppActions(self)
        self.guard = WindowGuard(parent=self)
        self.runner = TaskRunner(self)
        self.approval = ApprovalController(self.guard, settings.autopilot_countdown_s, marker_color, self)
        self.approver = GuiApprover(self.runner.stop_event, after_decision=self.approval.after_decision,
                                    parent=self)
        self.approver.requested.connect(self.approval.present)
        self.approval.pause_requested.connect(self.pause_autopilot)
        self.approval.failed.connect(lambda exc: self.notifier.error("The approval overlay could not be shown", exc))
        self.approval_policy = ApprovalPolicy(settings.approval, self.approver, self.approver.autopilot)
        self.palette = CommandPalette()
        self.palette.set_mode_hint(settings.approval)
        self.palette.submitted.connect(self.start_task)
        self.guard.register(self.palette)
        self.hotkeys = GlobalHotkeys(self)
        self.hotkeys.palette_requested.connect(self.open_palette)
        self.hotkeys.stop_requested.connect(self.stop)
        self.hotkeys.failed.connect(lambda exc: self.notifier.error("Global hotkeys stopped working", exc))
        self._want_hotkeys = hotkeys
        self._progress: QProgressDialog | None = None
        self._settings_dialog: SettingsDialog | None = None
        self._history: HistoryWindow | None = None
        self._wizard: SetupWizard | None = None
        self.status = Status.IDLE

        self.tray: TrayIcon | None = None
        self.window: FallbackWindow | None = None
        self._put_away: str | None = None  # how the no-tray window was put away for the task running
        self.wm_minimises: bool | None = None  # the window manager minimised the no-tray window (None: not tried)
        self.tray_available = bool(QSystemTrayIcon.isSystemTrayAvailable())
        self._make_tray_or_window(headless=headless, force_window=force_window)
        self._connect_actions()
        self.actions.update_state(running=False, mode=settings.approval, paused=False)
        self._connect_runner()

    def _make_tray_or_window(self, *, headless: bool, force_window: bool) -> None:
        """The tray icon, else the small window (no tray, or ``force_window``); neither when headless."""
        if headless:
            log.info("headless: no tray icon and no window (tasks come from a caller)")
        elif self.tray_available and not force_window:
            self.tray = TrayIcon(self.actions, self)
            self.tray.activated_primary.connect(self.open_palette)
            self.notifier.tray = self.tray.icon
        else:
            self.window = FallbackWindow(self.actions, tray_missing=not self.tray_available)
            self.window.close_requested.connect(self.quit)
            self.notifier.dialog_parent = self.window
            self.notifier.posted.connect(self.window.show_notice)  # what the tray would show as a balloon
            if not self.tray_available:
                log.warning("no system tray available: showing the Holodesk window instead")

    def _connect_actions(self) -> None:
        """The menu's (and the window's) commands: each action, when triggered, runs its command."""
        a = self.actions
        commands: list[tuple[QAction, Callable[[], object]]] = [
            (a.new_task, self.open_palette), (a.pause, self.toggle_pause), (a.replay, self.choose_replay),
            (a.wizard, self.open_wizard), (a.settings, self.open_settings), (a.history, self.open_history),
            (a.open_logs, self.open_logs), (a.quit, self.quit),
            (a.stop, lambda: self.stop()),  # not stop(checked): its argument says who stopped it
        ]
        for action, command in commands:
            action.triggered.connect(command)
        a.mode_selected.connect(self.set_mode)

    def _connect_runner(self) -> None:
        """The task runner's signals (GUI thread)."""
        self.runner.state_changed.connect(self._on_state)
        self.runner.session_event.connect(self._on_event)
        self.runner.session_event.connect(self.approval.session_event)  # the thought while the step is proposed
        self.runner.finished.connect(self._on_finished)
        self.runner.failed.connect(self._on_failed)
        self.runner.progress.connect(self._on_progress)
        self.runner.running_changed.connect(self._on_running)

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self, *, first_run: bool = False) -> None:
        """Show the tray icon (or the window) and start the hotkeys. Never leaves the app invisible.
        ``first_run`` (no settings file yet): open the setup wizard too, since the defaults may not run
        on this machine."""
        if self.tray is not None:
            self.tray.show()
            self.notifier.info("Holodesk is running",
                               f"Press {hotkey_label(self.settings.hotkey_palette)} or click the tray icon to give it "
                               "a task.")
        if self.window is not None:
            self.window.show()  # placed by the window manager like any window, never kept above others
        if self._want_hotkeys:
            self.start_hotkeys()
        if first_run:
            self.open_wizard()

    def start_hotkeys(self) -> bool:
        """(Re)start the global hotkeys; a failure is shown to the user. True when listening."""
        try:
            self.hotkeys.start(self.settings.hotkey_palette, self.settings.hotkey_stop)
        except (HolodeskError, ImportError, OSError) as exc:
            self.notifier.error("Global hotkeys are not available", exc,
                                "Use the tray menu (or the Holodesk window) instead: New task..., Stop.")
            return False
        return True

    def quit(self) -> None:
        """:meth:`shutdown`, then leave the event loop."""
        self.shutdown()
        app = QApplication.instance()
        if app is not None:
            app.quit()

    def shutdown(self, wait_s: float = 5.0) -> None:
        """Stop any task (waiting up to ``wait_s`` seconds for it), stop the hotkeys, close every window
        and the policy. The event loop keeps running; no task starts any more (:data:`CLOSING`)."""
        self.closing = True
        self.stop()
        self.runner.wait(wait_s)
        self.hotkeys.stop()
        self.approval.close()
        self.palette.hide()
        if self.tray is not None:
            self.tray.hide()
        if self.window is not None:
            self.window.hide()
        for w in (self._settings_dialog, self._history, self._wizard):
            if w is not None:
                w.close()
        try:
            self.policies.close()
        except Exception:  # closing at exit: log, never block quitting
            log.exception("closing the policy failed")

    # -- commands ---------------------------------------------------------------------------------
    def open_palette(self) -> None:
        """Show the command box (palette hotkey, tray click, New task...)."""
        if self.runner.running:
            self.notifier.info("A task is running", "Stop it first (tray > Stop or the stop hotkey).")
            return
        self.palette.set_mode_hint(self.approval_policy.mode)
        self.palette.open()

    def start_task(self, task: str, settings: Settings | None = None) -> bool:
        """Run ``task`` on the worker thread, with ``settings`` (default: the current settings). False (and
        the user is told) when it cannot start."""
        run_settings = settings or self.settings
        if self.closing:  # a task queued (by a caller) as the app was told to quit: it never starts
            log.warning("not starting %r: %s", task, CLOSING)
            return False
        try:
            check_task(task)
            if self.runner.running:
                raise RuntimeError("a task is already running; stop it first")
            self._task_settings = run_settings
            self._window_out_of_the_way(True)
            try:
                # One task drives the desktop: the drive lock is held from building the session to the end.
                self.runner.start(task, self._build_session, hold=DriveLock.acquire)
            except BaseException:
                self._window_out_of_the_way(False)
                raise
        except (RuntimeError, ValueError) as exc:
            self.notifier.error("Cannot start the task", exc)
            return False
        self._last_task = (task, run_settings)
        return True

    def retry(self) -> None:
        """Run the last task again (the Retry button of an error); with the current settings unless it was
        a replay."""
        if self._last_task is None:
            return
        task, settings = self._last_task
        self.start_task(task, settings if settings.policy == "script" else None)

    def replay_file(self, path: Path) -> None:
        """Replay a file of protocol replies as a task (tray: Replay a file...); every step is approved as
        usual. The settings stay as they are."""
        settings = self.settings.model_copy(update={"policy": "script", "script_file": Path(path)})
        self.start_task(f"Replay of {Path(path).name}", settings)

    def choose_replay(self) -> None:
        """Ask for a replay file, then :meth:`replay_file`."""
        start = str(self.settings.script_file or Path.home())
        path, _ = QFileDialog.getOpenFileName(None, "Replay a file", start, "Replay files (*.jsonl *.txt);;All "
                                              "files (*)")
        if path:
            self.replay_file(Path(path))

    def open_wizard(self) -> SetupWizard:
        """Open the setup wizard (first run, tray: Setup wizard..., an error's "Open setup wizard")."""
        if self._wizard is not None and self._wizard.isVisible():
            bring_to_front(self._wizard)
            return self._wizard
        wizard = SetupWizard(self.settings, self.facts(), path=self.settings_path or config_path(),
                             download=self.download)
        wizard.applied.connect(self.apply_settings)
        self._wizard = wizard
        bring_to_front(wizard)
        return wizard

    def stop(self, by: str = "user") -> None:
        """Stop now: answer STOP to any pending approval and stop the session (any moment). ``by`` says
        who stopped it ("user", "the MCP client"); the episode records it."""
        if self.runner.running:
            self.runner.stop(by)
        self.approval.stop()

    def set_mode(self, mode: ApprovalMode | str) -> None:
        """Switch between step mode and autopilot (applies from the next step; not written to the file).

        Raises:
            ValueError: ``mode`` names no :class:`ApprovalMode`.
        """
        mode = approval_mode(mode)
        self.approval_policy.mode = mode
        self.approval_policy.paused = False
        self.actions.update_state(mode=mode, paused=False)
        self.palette.set_mode_hint(mode)
        self._refresh_status()

    def toggle_pause(self) -> None:
        """Pause / resume the autopilot: while paused every step asks the user."""
        paused = not self.approval_policy.paused
        self.approval_policy.paused = paused
        self.actions.update_state(paused=paused)
        self._refresh_status()
        self.notifier.info("Autopilot paused" if paused else "Autopilot resumed",
                           "Every step now asks you." if paused else "Low-risk steps run after the countdown.")

    def pause_autopilot(self) -> None:
        """Pause the autopilot (P on the overlay's countdown); no-op when already paused."""
        if not self.approval_policy.paused:
            self.toggle_pause()

    def open_settings(self) -> SettingsDialog:
        """Open the Settings dialog (one at a time)."""
        if self._settings_dialog is not None and self._settings_dialog.isVisible():
            bring_to_front(self._settings_dialog)
            return self._settings_dialog
        monitors: list[str] = []
        try:
            monitors = [f"{s.name()} {s.geometry().width()}x{s.geometry().height()} at "
                        f"{s.geometry().x():+d}{s.geometry().y():+d}" for s in QGuiApplication.screens()]
        except RuntimeError:
            monitors = []
        gpu = probe_gpus().best
        dialog = SettingsDialog(self.settings, path=self.settings_path or config_path(), monitors=monitors,
                                gpu=gpu, bandwidth=memory_bandwidth(gpu.index) if gpu is not None else None)
        dialog.saved.connect(self.apply_settings)
        self._settings_dialog = dialog
        bring_to_front(dialog)
        return dialog

    def apply_settings(self, settings: Settings) -> None:
        """Use new settings from the next task on (hotkeys restart at once)."""
        old = self.settings
        self.settings = settings
        self.approval.countdown_s = settings.autopilot_countdown_s
        if settings.approval != old.approval:
            self.set_mode(settings.approval)
        if self._want_hotkeys and (settings.hotkey_palette, settings.hotkey_stop) != (old.hotkey_palette,
                                                                                     old.hotkey_stop):
            self.start_hotkeys()

    def open_history(self) -> HistoryWindow:
        window = HistoryWindow(self.settings.episodes_dir)
        self._history = window
        window.show()
        window.raise_()
        return window

    def logs_dir(self) -> Path:
        return Path(self.settings.data_dir) / "logs"

    def open_logs(self) -> None:
        folder = self.logs_dir()
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder))):
            self.notifier.warning("Cannot open the logs folder", f"The logs are in {folder}.")

    # -- session ----------------------------------------------------------------------------------
    def _build_session(self, progress: ProgressFn) -> Session:
        """Worker thread: the task's Session (:func:`holodesk.session.factory.build_session`) with the
        task's settings, the app's approval and the policy kept in :attr:`policies` while the settings it
        is built from stay the same.

        Raises:
            DisplayError, CaptureError, ModelLoadError, SettingsError, SecretStoreError, PolicyError.
        """
        s = self._task_settings
        session = build_session(
            s, self.approval_policy,
            policy=lambda settings: self.policies.get(settings, lambda fresh: self.policy_factory(fresh, progress)),
            capture=self.capture_factory,
            executor=self.executor_factory,
            # One stop event for everything of this task: the tray/hotkey Stop, the Session's wall-time cap,
            # the pending approval and a running ``wait`` of the executor all set or watch it (F09, F12).
            stop_event=self.runner.stop_event,
            focus_probe=self.focus_probe,
            window_probe=self.window_probe,
            before_capture=self.guard.before_capture,
            after_capture=self.guard.after_capture,
            meta={"ui": "tray"},
        )
        progress("Ready", 1.0)
        return session

    def _set_status(self, status: Status, detail: str = "") -> None:
        self.status = status
        if self.tray is not None:
            self.tray.set_status(status, detail)
        if self.window is not None:
            self.window.set_status(status, detail)
        self.status_changed.emit(status)

    def _refresh_status(self) -> None:
        self._set_status(self.status)

    def _on_state(self, state: State) -> None:
        if state in (State.CAPTURING, State.THINKING):
            self._close_progress()
        self._set_status(status_for_state(state), f"{state.value.replace('_', ' ')}")

    def _on_event(self, event: SessionEvent) -> None:
        if event.kind == "warning":
            self.notifier.warning(f"Step {event.step + 1}", event.message)

    def _on_progress(self, message: str, fraction: object) -> None:
        if message == "Ready":
            self._close_progress()
            return
        self._set_status(Status.THINKING, message)
        if self._progress is None:
            dialog = QProgressDialog(message, "Stop", 0, 0)
            dialog.setWindowTitle("Holodesk")
            dialog.setMinimumDuration(500)
            dialog.setAutoClose(False)
            dialog.canceled.connect(self.stop)
            self._progress = dialog
        self._progress.setLabelText(message)
        if isinstance(fraction, int | float):
            self._progress.setRange(0, 1000)
            self._progress.setValue(round(float(fraction) * 1000))

    def _close_progress(self) -> None:
        """Close the loading dialog without it counting as the user's Stop (closing emits ``canceled``)."""
        dialog, self._progress = self._progress, None
        if dialog is not None:
            dialog.canceled.disconnect(self.stop)
            dialog.hide()
            dialog.deleteLater()

    def _on_finished(self, result: EpisodeResult) -> None:
        self.last_result = result
        where = f"\nRecorded in {result.episode_path}" if result.episode_path else ""
        if result.status is State.FAILED:
            self._set_status(Status.ERROR, result.reason)
            self.notifier.error("The task failed", result.reason + where, remedies=("retry", "settings"))
        else:
            self._set_status(Status.IDLE, result.reason)
            text = result.reason + (f"\nAnswer: {result.answer}" if result.answer else "") + where
            self.notifier.info("Task stopped" if result.status is State.STOPPED else "Task finished", text)
        self.task_finished.emit(result)

    def _on_failed(self, exc: BaseException) -> None:
        self.last_result = None
        self._close_progress()
        self._set_status(Status.ERROR, str(exc))
        self.notifier.error("The task could not run", exc, self._advice_for(exc))

    def _advice_for(self, exc: BaseException) -> str:
        """What to do when the local model cannot load on a machine where it does not fit: the fit rule's
        words and the wizard (a server or a replay file), instead of the loader's own hint. "" otherwise
        (the error's own hint is shown)."""
        if not isinstance(exc, ModelLoadError) or self._task_settings.policy != "local":
            return ""
        gpu = probe_gpus().best
        # the chosen model's need (a folder outside the registry is judged as the default model)
        model = find_model(self._task_settings.model) or get_model(DEFAULT_MODEL)
        if gpu is not None and model.best_precision(gpu.free_bytes) is not None:
            return ""
        return (model.explain_fit(gpu.free_bytes if gpu else None, gpu.name if gpu else "this GPU")
                + " Open the setup wizard to switch to a smaller model, a server or a replay file.")

    def _on_running(self, running: bool) -> None:
        self.actions.update_state(running=running)
        if not running:
            self._window_out_of_the_way(False)

    @staticmethod
    def _minimised(window: QWidget) -> bool:
        """Whether ``window`` is minimised: by Qt's state, or on X11 by the window manager's ``WM_STATE``
        (:func:`x11.window_iconic`; Qt can miss the change)."""
        if window.isMinimized():
            return True
        return QGuiApplication.platformName() == "xcb" and x11.window_iconic(int(window.winId())) is True

    @staticmethod
    def _wait_viewable(window_id: int, timeout_s: float = 2.0) -> None:
        """Wait (handling Qt's events, at most ``timeout_s``) until X window ``window_id`` is viewable."""
        deadline = time.monotonic() + timeout_s
        while x11.window_viewable(window_id) is False and time.monotonic() < deadline:
            QCoreApplication.processEvents()
            time.sleep(0.01)

    def _window_out_of_the_way(self, running: bool) -> None:
        """Before a task: minimise the no-tray window (through the window manager, :func:`x11.iconify`),
        so that the task's clicks and keys reach the programs it is about; where the window manager does
        not minimise it within :data:`MINIMISE_TIMEOUT_S`, hide it for the task (logged), and hide it at once
        for every later task of this process (:attr:`wm_minimises` False: the wait is not paid again). After
        the task: show it again (with the result), unless the user already did."""
        window = self.window
        if window is None:
            return
        if running:
            self._put_away = None
            if not window.isVisible() or window.isMinimized():
                return
            if self.wm_minimises is not False:
                on_x11 = QGuiApplication.platformName() == "xcb"
                if on_x11:  # a window shown again by the task before is minimised once the X server has mapped it
                    self._wait_viewable(int(window.winId()))  # (a request to minimise it sooner can be lost)
                if not (on_x11 and x11.iconify(int(window.winId()))):
                    window.showMinimized()  # not X11: the platform's own way
                deadline = time.monotonic() + MINIMISE_TIMEOUT_S
                while not self._minimised(window) and time.monotonic() < deadline:
                    QCoreApplication.processEvents()
                    time.sleep(0.01)
                self.wm_minimises = self._minimised(window)
                if self.wm_minimises:
                    self._put_away = "minimised"
                    return
                log.warning("the window manager did not minimise the Holodesk window within %.0f s; hiding it "
                            "while this task and every later one runs instead", MINIMISE_TIMEOUT_S)
            window.hide()
            self._put_away = "hidden"
            return
        put_away, self._put_away = self._put_away, None
        if put_away == "minimised" and self._minimised(window):
            if not window.isMinimized():  # Qt missed the change: tell it, so that showNormal restores the window
                window.setWindowState(Qt.WindowState.WindowMinimized)
            window.showNormal()
        elif put_away == "hidden":
            window.showNormal()



LOG_MAX_BYTES = 2_000_000
"""Size at which the log file is rotated (``holodesk.log`` -> ``holodesk.log.1`` ...)."""
LOG_BACKUPS = 3
"""Rotated log files kept."""


def _create_private(path: Path) -> None:
    """Create ``path`` empty and ``0600`` unless it exists (then it is left as it is)."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600))


def private_log_handler(path: Path, max_bytes: int = LOG_MAX_BYTES,
                        backups: int = LOG_BACKUPS) -> logging.handlers.RotatingFileHandler:
    """A rotating log file at ``path`` only its owner can read (task words, window titles, typed text in
    approvals): the folder ``0700``, the file and each rotated one ``0600``, also where an older Holodesk
    left them open to others. The file is created ``0600`` before the handler opens it, and again after each
    rotation (the handler's ``rotator``), so it is never readable by others, not even for a moment.

    Raises:
        OSError: the folder or file cannot be created or made private.
    """
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    for existing in [path, *(path.with_name(f"{path.name}.{n}") for n in range(1, backups + 1))]:
        if existing.exists():
            os.chmod(existing, 0o600)
    _create_private(path)
    handler = logging.handlers.RotatingFileHandler(path, maxBytes=max_bytes, backupCount=backups,
                                                   encoding="utf-8")

    def rotate(source: str, dest: str) -> None:  # as the default rotation, then the new file private at once
        if os.path.exists(source):
            os.rename(source, dest)
        _create_private(Path(source))

    handler.rotator = rotate
    return handler


def _log_to_file(settings: Settings) -> logging.Handler | None:
    """Send INFO and up of the ``holodesk`` loggers to ``DATA_DIR/logs/holodesk.log`` (private:
    :func:`private_log_handler`); returns the handler, or None when the file cannot be written (logged)."""
    folder = Path(settings.data_dir) / "logs"
    try:
        handler = private_log_handler(folder / "holodesk.log")
    except OSError as exc:
        log.warning("cannot write logs to %s: %s", folder, exc)
        return None
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.INFO)
    # The file gets INFO and up; the console keeps the verbosity the command line chose.
    console_level = logging.getLogger().getEffectiveLevel()
    for h in logging.getLogger().handlers:
        if h.level == logging.NOTSET:
            h.setLevel(console_level)
    logger = logging.getLogger("holodesk")
    logger.addHandler(handler)
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    return handler


def _prefer_xwayland(environ: MutableMapping[str, str]) -> None:
    """On a Wayland session with XWayland, run Qt through XWayland (``QT_QPA_PLATFORM=xcb``) unless the
    user chose a platform: a Wayland client cannot place a window at a screen position or keep it above
    others, which the approval overlay needs (its marks sit on the point to be clicked), and the capture
    hooks wait for the X server to unmap it. The overlay's X coordinates are Mutter's logical layout, the
    Mutter backend's input space."""
    if (sys.platform.startswith("linux") and environ.get("WAYLAND_DISPLAY") and environ.get("DISPLAY")
            and not environ.get("QT_QPA_PLATFORM")):
        environ["QT_QPA_PLATFORM"] = "xcb"
        log.info("Wayland session: the UI runs through XWayland (QT_QPA_PLATFORM=xcb)")


def run_app(force_window: bool = False, instance: InstanceLock | None = None) -> int:
    """Start the desktop app and run its event loop.

    Args:
        force_window: show the small window instead of the tray icon even when a tray exists.
        instance: this desktop's instance lock (:func:`holodesk.instance.InstanceLock.acquire`); the app
            then answers ``holodesk stop`` / ``holodesk palette`` / ``holodesk mcp`` on the channel.
    Returns:
        The process exit status: 0 after Quit; 2 when the settings cannot be loaded (the error is shown).
    """
    app = QApplication.instance()
    if not isinstance(app, QApplication):
        _prefer_xwayland(os.environ)
        app = QApplication(sys.argv[:1])
    app.setApplicationName("Holodesk")
    app.setQuitOnLastWindowClosed(False)
    app.setWindowIcon(app_icon())
    try:
        settings = load_settings()
    except SettingsError as exc:
        box = QMessageBox(QMessageBox.Icon.Critical, "Holodesk — settings", str(exc))
        box.setTextFormat(Qt.TextFormat.PlainText)
        box.exec()
        return 2
    _log_to_file(settings)
    first_run = not config_path().exists()
    holo = HolodeskApp(settings, force_window=force_window, download=hub_download)
    restore = install_exception_hooks(holo.notifier)
    channel: ChannelServer | None = None
    try:
        if instance is not None:
            channel = ChannelServer(instance, AppRemote(holo).handle)
            try:
                channel.start()
            except ChannelError as exc:  # the app still works; the commands cannot reach it (told, logged)
                channel = None
                holo.notifier.error("`holodesk stop` and `holodesk palette` will not reach this app", exc)
        holo.start(first_run=first_run)
        with _quit_on_signals(holo):
            return int(app.exec())
    finally:
        if channel is not None:
            channel.close()
        restore()


@contextlib.contextmanager
def _quit_on_signals(holo: HolodeskApp) -> Iterator[None]:
    """While the event loop runs, SIGTERM, SIGHUP and SIGINT (the session ending, ``kill``, Ctrl+C) stop any
    task, recorded as stopped by that signal (its record gets its end), and quit the app."""
    def on_signal(signum: int, _frame: Any) -> None:
        log.info("signal %d: stopping any task and quitting", signum)
        holo.stop(by=stopped_by_signal(signum))
        holo.quit()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    wake = QTimer()  # Python runs signal handlers only between bytecodes: let it run while Qt waits
    wake.timeout.connect(lambda: None)
    wake.start(200)
    try:
        yield
    finally:
        wake.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
